//! [`Rig`]: one worker's translator pipeline wired to its own software RNIC and collector
//! stores in memory, the wires replaced by function calls. The per-packet path of every
//! in-memory measurement.

use dta_collector::config::{CollectorConfig, DeviceSection};
use dta_collector::rnic::responder::{DeviceConfig, QpConfig, Responder};
use dta_collector::store::{build_stores, Store};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::meta::QpMeta;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::roce::L2L4_LEN;
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;

use super::*;
use crate::gen::Scenario;

/// One worker's translator pipeline wired to its own software RNIC, in memory.
pub struct Rig {
    /// The translator pipeline (production code).
    pub pipeline: Pipeline,
    /// The software RNIC (production code).
    pub rnic: Responder,
    /// The collector stores, in [`Scenario::stores`] order.
    pub stores: Vec<Store>,
    tx: TxBatch,
    rnic_tx: TxBatch,
    mode: RnicMode,
    /// Datagrams to this port go to the INT ingest (Telemetry Report scenarios).
    int_port: Option<u16>,
    /// Frames emitted and their bytes.
    pub frames: u64,
    /// Bytes of the frames emitted.
    pub frame_bytes: u64,
    /// Each store's name and QP binding (to start its QP afresh without an RNIC, [`Rig::pump`]).
    bindings: Vec<(String, QpBinding)>,
}

/// Without an RNIC, the pipeline's QPs start afresh once this many frames are unconfirmed: half
/// the largest cap on unconfirmed PSNs, past which they would refuse reports.
const RELIEVE_AT: u64 = dta_translator::datapath::qp::MAX_OUTSTANDING as u64 / 2;

impl Rig {
    /// Builds worker `worker` of `workers` for `sc`.
    pub fn new(
        sc: &Scenario,
        worker: usize,
        workers: usize,
        o: &MemOptions,
    ) -> Result<Rig, String> {
        let cfg = CollectorConfig {
            collector: DeviceSection {
                roce: RIG_COLLECTOR,
                hugepages: false,
                verify_icrc: o.verify_icrc,
                // The scenario's stores are written with its N (up to 8).
                max_redundancy: 8,
                ..DeviceSection::default()
            },
            static_peers: vec![],
            stores: sc.stores(),
            export: Default::default(),
            pull: None,
        };
        let mut rnic = Responder::new(DeviceConfig {
            local: RIG_COLLECTOR,
            local_mac: COLLECTOR_MAC,
            pmtu: 4096,
            l2_frames: true,
        });
        let mut stores = build_stores(&cfg, &mut rnic)?;
        let mut metas = Vec::new();
        for (i, s) in stores.iter_mut().enumerate() {
            let psn = Psn::new(0x1000 + i as u32 * 0x111);
            let peer_qpn = 0x100 + (worker * 16 + i) as u32;
            let qpn = rnic.create_qp(QpConfig {
                peer: RIG_TRANSLATOR,
                peer_mac: TRANSLATOR_MAC,
                peer_qpn: Qpn::new(peer_qpn),
                rq_psn: psn,
                sq_psn: Psn::new(0),
                verify_icrc: o.verify_icrc,
                recv_credits: 1 << 20,
            });
            s.meta.qps.push(QpMeta {
                qpn: qpn.value(),
                psn: psn.value(),
                peer_qpn,
            });
            metas.push(s.meta.clone());
        }
        let target = CollectorTarget {
            roce: RIG_COLLECTOR,
            mac: COLLECTOR_MAC,
            stores: metas
                .iter()
                .map(|m| {
                    (
                        m.clone(),
                        QpBinding {
                            local_qpn: Qpn::new(m.qps[0].peer_qpn),
                            remote_qpn: Qpn::new(m.qps[0].qpn),
                            start_psn: Psn::new(m.qps[0].psn),
                        },
                    )
                })
                .collect(),
        };
        let ack_timeout_ns = match o.rnic {
            RnicMode::Inline => 2_000_000,
            RnicMode::Off => u64::MAX / 4,
        };
        let pc = PipelineConfig {
            worker,
            workers,
            parse: sc.parse_config(),
            max_redundancy: 8,
            l2_frames: true,
            local: RIG_TRANSLATOR,
            local_mac: TRANSLATOR_MAC,
            nack_port: dta_proto::consts::DTA_NACK_PORT,
            append_flush_ns: o.append_flush_ns,
            postcard_flush_ns: o.postcard_flush_ns,
            postcard_cache_slots: sc.cache_slots,
            postcard_redundancy: 1,
            qp: QpTuning {
                ack_every: 16,
                ack_timeout_ns,
                // Without an RNIC nothing is ever acknowledged: the largest cap on unconfirmed
                // PSNs lets the pipeline alone take 2^22 frames before it must refuse reports
                // (the default, 2^20, would have `bench micro` time refusals after half a
                // million Key-Write reports).
                max_outstanding: match o.rnic {
                    RnicMode::Inline => QpTuning::default().max_outstanding,
                    RnicMode::Off => dta_translator::datapath::qp::MAX_OUTSTANDING,
                },
                ..QpTuning::default()
            },
            rate: RateLimit::default(),
            backlog: 1024,
            max_reporters: o.max_reporters,
            route_keywrite: Route::Single(0),
            route_keyincrement: Route::Single(1),
            route_postcard: Route::Single(2),
            sketch: sc.sketch.map(|s| s.settings()).unwrap_or_default(),
        };
        let bindings = target
            .stores
            .iter()
            .map(|(m, qpb)| (m.name.clone(), *qpb))
            .collect();
        let mut pipeline = Pipeline::new(pc, &[target]).map_err(|e| e.to_string())?;
        let int_port = (sc.telemetry != 0).then_some(sc.int_port);
        if int_port.is_some() {
            pipeline.set_int_ingest(sc.int_settings());
        }
        // A Telemetry Report may derive up to MAX_DERIVED reports.
        let per = pipeline.frames_per_report_max()
            * if int_port.is_some() {
                dta_translator::datapath::int_ingest::MAX_DERIVED
            } else {
                1
            };
        let cap = o.burst.max(1) * per + 256;
        Ok(Rig {
            pipeline,
            rnic,
            stores,
            tx: TxBatch::new(cap, 2048),
            rnic_tx: TxBatch::new(cap, 256),
            mode: o.rnic,
            int_port,
            frames: 0,
            frame_bytes: 0,
            bindings,
        })
    }

    /// Feeds one burst of reports at `now`, and moves every frame it produced.
    #[inline]
    pub fn feed(&mut self, now: u64, burst: &[Datagram<'_>]) {
        match self.int_port {
            None => self.pipeline.handle_reports(now, burst, &mut self.tx),
            Some(port) => {
                // Runs of INT and of DTA datagrams, each to its handler.
                let mut i = 0;
                while i < burst.len() {
                    let int = burst[i].dst.port() == port;
                    let mut j = i + 1;
                    while j < burst.len() && (burst[j].dst.port() == port) == int {
                        j += 1;
                    }
                    if int {
                        self.pipeline
                            .handle_int_reports(now, &burst[i..j], &mut self.tx);
                    } else {
                        self.pipeline
                            .handle_reports(now, &burst[i..j], &mut self.tx);
                    }
                    i = j;
                }
            }
        }
        self.pump(now);
    }

    /// Fires due timers.
    #[inline]
    pub fn tick(&mut self, now: u64) {
        if self.pipeline.next_deadline().is_some_and(|d| d <= now) {
            self.pipeline.poll(now, &mut self.tx);
            self.pump(now);
        }
    }

    /// Writes every partial batch and cache entry and moves the frames.
    pub fn flush(&mut self, now: u64) {
        while !self.pipeline.flush_all(now, &mut self.tx) {
            self.pump(now);
        }
        self.pump(now);
    }

    /// Moves queued frames: translator → RNIC, and the RNIC's ACKs back.
    #[inline]
    pub fn pump(&mut self, now: u64) {
        for i in 0..self.tx.len() {
            self.frame_bytes += self.tx.frame(i).len() as u64;
        }
        self.frames += self.tx.len() as u64;
        if self.mode == RnicMode::Off {
            self.tx.clear();
            // Nothing acknowledges the pipeline alone: before its QPs reach the cap on
            // unconfirmed PSNs, where they would refuse reports and a benchmark would time
            // refusals, they start afresh, as after a reconnection (a ring's allocation every
            // two million frames; the frames they held count as unconfirmed at reconnect).
            if self.pipeline.unconfirmed_frames() >= RELIEVE_AT {
                for (name, qpb) in &self.bindings {
                    self.pipeline.rebind(name, *qpb, None);
                }
            }
            return;
        }
        for i in 0..self.tx.len() {
            let f = self.tx.frame(i);
            if f.len() <= L2L4_LEN || self.tx.dest(i).port() != RIG_COLLECTOR.port() {
                continue;
            }
            // What a raw backend reads out of the IPv4 header for the ICRC.
            let d = Datagram {
                src: RIG_TRANSLATOR,
                dst: RIG_COLLECTOR,
                ip: Some(IpMeta {
                    ident: u16::from_be_bytes([f[18], f[19]]),
                    dont_frag: f[20] & 0x40 != 0,
                    ttl: f[22],
                    tos: f[15],
                }),
                payload: &f[L2L4_LEN..],
            };
            self.rnic.handle(&d, &mut self.rnic_tx);
        }
        self.tx.clear();
        for i in 0..self.rnic_tx.len() {
            let f = self.rnic_tx.frame(i);
            if f.len() <= L2L4_LEN {
                continue;
            }
            let d = Datagram {
                src: RIG_COLLECTOR,
                dst: RIG_TRANSLATOR,
                ip: None,
                payload: &f[L2L4_LEN..],
            };
            self.pipeline
                .handle_responses(now, std::slice::from_ref(&d), &mut self.tx);
        }
        self.rnic_tx.clear();
        // Responses may release queued or resent frames.
        self.pipeline.poll_transmit(now, &mut self.tx);
        if !self.tx.is_empty() {
            self.frames += self.tx.len() as u64;
            for i in 0..self.tx.len() {
                self.frame_bytes += self.tx.frame(i).len() as u64;
                let f = self.tx.frame(i);
                if f.len() > L2L4_LEN {
                    let d = Datagram {
                        src: RIG_TRANSLATOR,
                        dst: RIG_COLLECTOR,
                        ip: Some(IpMeta {
                            ident: u16::from_be_bytes([f[18], f[19]]),
                            dont_frag: f[20] & 0x40 != 0,
                            ttl: f[22],
                            tos: f[15],
                        }),
                        payload: &f[L2L4_LEN..],
                    };
                    self.rnic.handle(&d, &mut self.rnic_tx);
                }
            }
            self.tx.clear();
            // ACKs of these are folded into the next pump.
        }
    }

    /// The store called `name`.
    pub fn store(&self, name: &str) -> Option<&Store> {
        self.stores.iter().find(|s| s.meta.name == name)
    }
}
