//! A minimal RDMA_CM initiator over real verbs: connects to a store's listener, receives the
//! metadata SEND, and issues RDMA WRITE (with or without Immediate), READ and FETCH_ADD into
//! the advertised region. It exists to prove the real-RNIC backend end to end (binary
//! `dta-rdma-selftest`, run inside the Soft-RoCE VM); the translator has its own initiator.
//!
//! Everything is blocking with timeouts; one operation is outstanding at a time.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use rdma_sys::*;

use dta_proto::wire::metarec::MetaRecord;

use super::verbs::{self, CmId, Cq, EventChannel, Mr, Pd, SendOp};

/// Local buffer: the metadata receive at 0, operation data after it.
const BUF_LEN: usize = 8192;
const RECV_AT: usize = 0;
const RECV_LEN: usize = 256;
const DATA_AT: usize = 512;

/// One connection to one store.
pub struct Connection {
    /// The store's record as the collector sent it.
    pub meta: MetaRecord,
    /// Our QPN.
    pub qpn: u32,
    timeout: Duration,
    // Drop order: the id (and its QP), the CQ, the MR, the buffer, the PD, the channel.
    id: CmId,
    cq: Cq,
    mr: Mr,
    buf: Box<[u8]>,
    _pd: Pd,
    channel: EventChannel,
}

/// Waits for an rdma_cm event of kind `want` on `channel`.
fn wait_event(channel: &EventChannel, want: u32, timeout: Duration) -> Result<(), String> {
    use rdma_cm_event_type::*;
    let deadline = Instant::now() + timeout;
    loop {
        let mut ev = std::ptr::null_mut();
        // SAFETY: live non-blocking channel, valid out-pointer.
        if unsafe { rdma_get_cm_event(channel.0, &mut ev) } == 0 {
            // SAFETY: a valid event until acknowledged.
            let (kind, status) = unsafe {
                let k = ((*ev).event, (*ev).status);
                rdma_ack_cm_event(ev);
                k
            };
            if kind == want {
                return Ok(());
            }
            match kind {
                RDMA_CM_EVENT_ADDR_ERROR
                | RDMA_CM_EVENT_ROUTE_ERROR
                | RDMA_CM_EVENT_CONNECT_ERROR
                | RDMA_CM_EVENT_UNREACHABLE
                | RDMA_CM_EVENT_REJECTED
                | RDMA_CM_EVENT_DISCONNECTED
                | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    return Err(format!(
                        "waiting for {}: got {} (status {status})",
                        verbs::event_name(want),
                        verbs::event_name(kind)
                    ))
                }
                _ => continue,
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("timed out waiting for {}", verbs::event_name(want)));
        }
        let mut pfd = libc::pollfd {
            fd: channel.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, left.as_millis().clamp(1, 100) as i32) };
    }
}

impl Connection {
    /// Connects to the listener at `server`, waits for ESTABLISHED and the metadata SEND.
    pub fn connect(server: SocketAddrV4, timeout: Duration) -> Result<Connection, String> {
        use rdma_cm_event_type::*;
        let channel = EventChannel::new().map_err(|e| format!("rdma_create_event_channel: {e}"))?;
        verbs::set_nonblocking(channel.fd()).map_err(|e| e.to_string())?;
        let id = CmId::new(&channel, 0).map_err(|e| format!("rdma_create_id: {e}"))?;
        let mut dst = verbs::sockaddr_in(server);
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: live id, valid destination address.
        if unsafe {
            rdma_resolve_addr(
                id.0,
                std::ptr::null_mut(),
                &mut dst as *mut _ as *mut libc::sockaddr,
                ms,
            )
        } != 0
        {
            return Err(format!("rdma_resolve_addr({server}): {}", verbs::errno()));
        }
        wait_event(&channel, RDMA_CM_EVENT_ADDR_RESOLVED, timeout)?;
        // SAFETY: live id with a resolved address.
        if unsafe { rdma_resolve_route(id.0, ms) } != 0 {
            return Err(format!("rdma_resolve_route: {}", verbs::errno()));
        }
        wait_event(&channel, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout)?;
        let ctx = id.verbs();
        let pd = Pd::new(ctx).map_err(|e| format!("ibv_alloc_pd: {e}"))?;
        let cq = Cq::new(ctx, 64, None).map_err(|e| format!("ibv_create_cq: {e}"))?;
        let mut buf = vec![0u8; BUF_LEN].into_boxed_slice();
        // SAFETY: buf lives in the Connection and is dropped after the MR.
        let mr = unsafe {
            Mr::register(
                &pd,
                buf.as_mut_ptr(),
                buf.len(),
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
            )
        }
        .map_err(|e| format!("ibv_reg_mr: {e}"))?;
        // SAFETY: plain C struct, all-zero is valid.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.0;
        attr.recv_cq = cq.0;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.cap.max_send_wr = 16;
        attr.cap.max_recv_wr = 4;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        // SAFETY: live id, PD and CQ on the id's device.
        if unsafe { rdma_create_qp(id.0, pd.0, &mut attr) } != 0 {
            return Err(format!("rdma_create_qp: {}", verbs::errno()));
        }
        let mut c = Connection {
            meta: placeholder_record(),
            qpn: id.qpn(),
            timeout,
            id,
            cq,
            mr,
            buf,
            _pd: pd,
            channel,
        };
        let addr = c.addr(RECV_AT);
        // SAFETY: live QP; the receive area is registered and owned by c.
        unsafe { verbs::post_recv(c.id.qp(), 1, addr, RECV_LEN as u32, c.mr.lkey()) }
            .map_err(|e| format!("ibv_post_recv: {e}"))?;
        // SAFETY: plain C struct, all-zero is valid.
        let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
        param.responder_resources = 1;
        param.initiator_depth = 1;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        // SAFETY: live id with a QP.
        if unsafe { rdma_connect(c.id.0, &mut param) } != 0 {
            return Err(format!("rdma_connect: {}", verbs::errno()));
        }
        wait_event(&c.channel, RDMA_CM_EVENT_ESTABLISHED, timeout)?;
        let wc = c.wait_completion()?;
        if wc.0 != ibv_wc_opcode::IBV_WC_RECV {
            return Err(format!("expected the metadata SEND, got opcode {}", wc.0));
        }
        let len = (wc.1 as usize).min(RECV_LEN);
        c.meta = MetaRecord::parse(&c.buf[RECV_AT..RECV_AT + len])
            .map_err(|e| format!("bad metadata record ({len} bytes): {e:?}"))?;
        Ok(c)
    }

    fn addr(&self, at: usize) -> u64 {
        self.buf.as_ptr() as u64 + at as u64
    }

    /// Waits for one completion; returns (opcode, byte_len) or the failure.
    fn wait_completion(&mut self) -> Result<(u32, u32), String> {
        let deadline = Instant::now() + self.timeout;
        let mut wc = verbs::wc_array::<1>();
        loop {
            let n = self.cq.poll(&mut wc).map_err(|e| e.to_string())?;
            if n == 1 {
                if wc[0].status != ibv_wc_status::IBV_WC_SUCCESS {
                    return Err(format!(
                        "work request {} failed: {}",
                        wc[0].wr_id,
                        verbs::wc_status(wc[0].status)
                    ));
                }
                return Ok((wc[0].opcode, wc[0].byte_len));
            }
            if Instant::now() > deadline {
                return Err("timed out waiting for a completion".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn remote(&self, offset: u64, len: usize) -> Result<u64, String> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.meta.len)
        {
            return Err(format!(
                "{offset}+{len} is outside the {}-byte region",
                self.meta.len
            ));
        }
        Ok(self.meta.addr + offset)
    }

    fn run(&mut self, op: SendOp, len: usize) -> Result<(), String> {
        if len > BUF_LEN - DATA_AT {
            return Err("operation too large".into());
        }
        let addr = self.addr(DATA_AT);
        // SAFETY: live QP; the data area is registered and owned by self, and we wait for
        // the completion before it is touched again.
        unsafe { verbs::post_send(self.id.qp(), 2, op, addr, len as u32, self.mr.lkey()) }
            .map_err(|e| format!("ibv_post_send: {e}"))?;
        self.wait_completion().map(drop)
    }

    /// RDMA WRITE of `data` at `offset` in the store.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), String> {
        let remote_addr = self.remote(offset, data.len())?;
        self.buf[DATA_AT..DATA_AT + data.len()].copy_from_slice(data);
        let rkey = self.meta.rkey;
        self.run(SendOp::Write { remote_addr, rkey }, data.len())
    }

    /// RDMA WRITE with Immediate.
    pub fn write_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), String> {
        let remote_addr = self.remote(offset, data.len())?;
        self.buf[DATA_AT..DATA_AT + data.len()].copy_from_slice(data);
        let rkey = self.meta.rkey;
        self.run(
            SendOp::WriteImm {
                remote_addr,
                rkey,
                imm,
            },
            data.len(),
        )
    }

    /// RDMA READ of `len` bytes at `offset`.
    pub fn read(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let remote_addr = self.remote(offset, len)?;
        let rkey = self.meta.rkey;
        self.run(SendOp::Read { remote_addr, rkey }, len)?;
        Ok(self.buf[DATA_AT..DATA_AT + len].to_vec())
    }

    /// FETCH_ADD on the u64 at `offset`; returns the original value.
    pub fn fetch_add(&mut self, offset: u64, add: u64) -> Result<u64, String> {
        let remote_addr = self.remote(offset, 8)?;
        let rkey = self.meta.rkey;
        self.run(
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            },
            8,
        )?;
        let b: [u8; 8] = self.buf[DATA_AT..DATA_AT + 8].try_into().expect("8 bytes");
        Ok(u64::from_ne_bytes(b))
    }

    /// Disconnects and waits (briefly) for the DISCONNECTED event.
    pub fn disconnect(self) -> Result<(), String> {
        // SAFETY: a live, connected id.
        if unsafe { rdma_disconnect(self.id.0) } != 0 {
            return Err(format!("rdma_disconnect: {}", verbs::errno()));
        }
        wait_event(
            &self.channel,
            rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED,
            self.timeout,
        )
    }
}

/// A record standing in until the real one arrives (never handed out).
fn placeholder_record() -> MetaRecord {
    MetaRecord {
        addr: 0,
        len: 0,
        rkey: 0,
        verify_icrc: false,
        list_heads: false,
        redundancy: None,
        kind: dta_proto::meta::StoreKind::KeyIncrement {
            slots: 2,
            hash: dta_proto::hash::HashProfile::Reference,
        },
    }
}
