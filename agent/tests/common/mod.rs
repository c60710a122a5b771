//! A hand-driven READ requester for the tests: RDMA_CM REQ/REP/RTU on the GSI QP, then RC READ
//! requests, over a dta-io UDP socket (which sends with DF and IPv4 ident 0, as the frames'
//! ICRC is sealed).

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_io::udp::{UdpOptions, UdpRx, UdpSocket, UdpTx};
use dta_proto::wire::cm::{build_cm_frame, parse_cm};
use dta_proto::wire::ib::{opcode as op, BthRepr, Psn, Qpn, RethRepr, Rkey, Syndrome};
use dta_proto::wire::mad::{rdma_cm_service_id, CmMessage, CmReq, CmRtu, MadHeaderRepr};
use dta_proto::wire::roce::{build_frame, frame_len, RoceEndpoint, RocePacket, L2L4_LEN};
use dta_proto::zero::{RegionRecord, RECORD_REP_OFFSET};

/// One requester socket; connections to agents are [`Conn`]s.
pub struct Requester {
    rx: UdpRx,
    tx: UdpTx,
    local: SocketAddrV4,
    next_id: u32,
}

/// A connected READ QP to one agent.
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub agent: SocketAddrV4,
    pub qpn: Qpn,
    pub psn: Psn,
    pub record: RegionRecord,
}

/// What the agent answered a REQ with.
#[derive(Debug)]
pub enum CmAnswer {
    Connected(Conn),
    Rejected(u16),
}

impl Requester {
    pub fn bind(ip: Ipv4Addr) -> Requester {
        let s = UdpSocket::bind(SocketAddrV4::new(ip, 0), &UdpOptions::default()).unwrap();
        let local = s.local_addr();
        let (rx, tx) = s.split();
        Requester {
            rx,
            tx,
            local,
            next_id: 0x1000,
        }
    }

    fn ep(&self, agent: SocketAddrV4) -> RoceEndpoint {
        RoceEndpoint {
            src_ip: *self.local.ip(),
            src_port: self.local.port(),
            dst_ip: *agent.ip(),
            dst_port: agent.port(),
            ..RoceEndpoint::default()
        }
    }

    fn send_cm(&mut self, agent: SocketAddrV4, tid: u64, msg: &CmMessage) {
        let mut f = [0u8; 512];
        let n = build_cm_frame(
            &self.ep(agent),
            Psn::new(0),
            &MadHeaderRepr::cm_send(tid, 0),
            msg,
            &mut f,
        );
        self.tx.send_to(agent, &f[L2L4_LEN..n]).unwrap();
    }

    /// Datagrams from `agent` until `done` says stop or `timeout` passes.
    fn recv_from(
        &mut self,
        agent: SocketAddrV4,
        timeout: Duration,
        mut done: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        let t0 = Instant::now();
        let mut finished = false;
        while !finished && t0.elapsed() < timeout {
            self.rx
                .recv_with(Duration::from_millis(10), |burst| {
                    for d in burst {
                        if d.src == agent && !finished {
                            finished = done(d.payload);
                        }
                    }
                })
                .unwrap();
        }
        finished
    }

    /// REQ, REP (with the region record), RTU.
    pub fn connect(&mut self, agent: SocketAddrV4, cm_port: u16) -> CmAnswer {
        self.next_id += 1;
        let id = self.next_id;
        let req = CmReq {
            local_comm_id: id,
            service_id: rdma_cm_service_id(cm_port),
            local_ca_guid: 0x5151,
            local_qpn: 0x4000 + id,
            starting_psn: 0x100,
            initiator_depth: 1,
            responder_resources: 1,
            ..CmReq::default()
        };
        self.send_cm(agent, id as u64, &CmMessage::Req(req));
        let mut answer = None;
        self.recv_from(agent, Duration::from_secs(5), |p| {
            match parse_cm(p).map(|c| c.msg) {
                Ok(CmMessage::Rep(rep)) => {
                    let at = RECORD_REP_OFFSET;
                    let record = RegionRecord::decode(&rep.private_data[at..at + 64])
                        .expect("the REP carries a region record");
                    answer = Some(Ok((rep, record)));
                }
                Ok(CmMessage::Rej(rej)) => answer = Some(Err(rej.reason)),
                _ => return false,
            }
            true
        });
        match answer.expect("an answer to the REQ") {
            Err(reason) => CmAnswer::Rejected(reason),
            Ok((rep, record)) => {
                let rtu = CmRtu {
                    local_comm_id: id,
                    remote_comm_id: rep.local_comm_id,
                    ..CmRtu::default()
                };
                self.send_cm(agent, id as u64, &CmMessage::Rtu(rtu));
                CmAnswer::Connected(Conn {
                    agent,
                    qpn: Qpn::new(rep.local_qpn),
                    psn: Psn::new(rep.starting_psn),
                    record,
                })
            }
        }
    }

    /// READs `len` bytes at region offset `offset`: the bytes, or the NAK's syndrome.
    pub fn read(&mut self, c: &mut Conn, offset: u64, len: u32) -> Result<Vec<u8>, Syndrome> {
        let bth = BthRepr::rc(op::RC_RDMA_READ_REQUEST, c.qpn, c.psn, true);
        let reth = RethRepr {
            va: c.record.addr + offset,
            rkey: Rkey(c.record.rkey),
            dma_len: len,
        };
        self.request(c, &bth, &reth.to_bytes(), &[]);
        let mut out = Vec::with_capacity(len as usize);
        let mut nak = None;
        let mut packets = 0;
        let first = c.psn;
        let ok = self.recv_from(c.agent, Duration::from_secs(5), |p| {
            let Ok(r) = RocePacket::parse(p) else {
                return false;
            };
            if let Some(a) = r.aeth {
                if !matches!(a.syndrome, Syndrome::Ack { .. }) {
                    nak = Some(a.syndrome);
                    return true;
                }
            }
            assert_eq!(r.bth.psn, first.add(packets), "responses in PSN order");
            packets += 1;
            out.extend_from_slice(r.payload);
            matches!(
                r.bth.opcode,
                op::RC_RDMA_READ_RESPONSE_LAST | op::RC_RDMA_READ_RESPONSE_ONLY
            )
        });
        if let Some(s) = nak {
            return Err(s);
        }
        assert!(ok, "the READ was answered");
        c.psn = first.add(packets);
        out.truncate(len as usize);
        Ok(out)
    }

    /// An RDMA WRITE (which a READ-only region must refuse): the syndrome answered.
    pub fn write(&mut self, c: &mut Conn, offset: u64, data: &[u8]) -> Syndrome {
        let bth = BthRepr::rc(op::RC_RDMA_WRITE_ONLY, c.qpn, c.psn, true);
        let reth = RethRepr {
            va: c.record.addr + offset,
            rkey: Rkey(c.record.rkey),
            dma_len: data.len() as u32,
        };
        self.request(c, &bth, &reth.to_bytes(), data);
        let mut syn = None;
        self.recv_from(c.agent, Duration::from_secs(5), |p| {
            syn = RocePacket::parse(p)
                .ok()
                .and_then(|r| r.aeth)
                .map(|a| a.syndrome);
            syn.is_some()
        });
        syn.expect("an answer to the WRITE")
    }

    fn request(&mut self, c: &Conn, bth: &BthRepr, ext: &[u8], payload: &[u8]) {
        let mut f = vec![0u8; frame_len(ext.len(), payload.len())];
        let n = build_frame(&self.ep(c.agent), bth, ext, payload, &mut f);
        self.tx.send_to(c.agent, &f[L2L4_LEN..n]).unwrap();
    }
}
