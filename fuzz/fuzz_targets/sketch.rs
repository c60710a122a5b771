//! Sketch-Merge: the report parser and the translator's merge state machine.
//!
//! Arbitrary bytes: parsing never panics, and whatever parses re-emits to exactly the input.
//! Then the same input drives a one-store pipeline (a small Count-Min, 3 expected switches,
//! at most 4 tracked) with a stream of datagrams: raw bytes, and well-formed reports with
//! fuzz-chosen switch, epoch, column range and (sometimes wrong) geometry, interleaved with
//! time steps that fire the flush timer. After every step each datagram is counted once
//! (merged or dropped: nothing is held as a report), every frame is a well-formed RoCEv2
//! WRITE inside the store's region, and every NACK parses (a sketch-column NACK names the
//! store's sketch and a switch that reported).
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_fuzz::Reader;
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::meta::StoreKind;
use dta_proto::sketch::{CellWidth, MergeOp, SketchKind, SketchLayout, SketchShape};
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::report::Priority;
use dta_proto::wire::roce::RocePacket;
use dta_proto::wire::sketch::{SketchReportRepr, MAX_SKETCH_REPORT_LEN};
use dta_translator::datapath::pipeline::single_store_pipeline_with;
use dta_translator::datapath::primitive::SketchSettings;
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 0x7f00_0000_0000;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = SketchReportRepr::parse(data) {
        let mut out = [0u8; MAX_SKETCH_REPORT_LEN];
        let n = r.emit(&mut out).expect("a parsed report emits");
        assert_eq!(&out[..n], data);
    }

    let shape = SketchShape::new(SketchKind::CountMin, 2, 64, 4).unwrap();
    let layout = SketchLayout::new(shape, 8, 2).unwrap();
    let kind = StoreKind::Sketch {
        sketch_id: 3,
        sketch: SketchKind::CountMin,
        rows: 2,
        columns: 64,
        cell_width: 4,
        batch: 8,
        epochs: 2,
        hash: shape.hash,
    };
    let mut p = single_store_pipeline_with(kind, |c| {
        c.l2_frames = false;
        c.sketch = SketchSettings {
            expected_switches: 3,
            max_switches: 4,
            flush_ns: 1000,
            ..SketchSettings::default()
        };
    });
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let mut tx = TxBatch::new(1024, 2048);
    let mut r = Reader::new(data);
    let mut now = 1u64;
    let mut buf = vec![0u8; MAX_SKETCH_REPORT_LEN];
    let mut cells = [0u8; 1024];
    let mut datagrams = 0u64;
    while !r.is_empty() {
        let len = match r.u8() % 4 {
            0 => {
                let raw = r.chunk();
                let n = raw.len().min(buf.len());
                buf[..n].copy_from_slice(&raw[..n]);
                n
            }
            1 => {
                now += (r.u16() as u64) * 10;
                p.poll(now, &mut tx);
                0
            }
            _ => {
                let wrong = r.u8();
                let rows = if wrong == 1 { 3 } else { 2 };
                let width = CellWidth::new(if wrong == 2 { 2 } else { 4 }).unwrap();
                let op = if wrong == 3 {
                    MergeOp::Max
                } else {
                    MergeOp::Sum
                };
                let columns = 1 + (r.u8() % 32) as u16;
                let n = columns as usize * rows as usize * width.bytes();
                let fill = r.u32();
                for (i, c) in cells[..n].iter_mut().enumerate() {
                    *c = (fill >> (i % 4 * 8)) as u8 ^ i as u8;
                }
                let rep = SketchReportRepr {
                    immediate: false,
                    priority: Priority::Medium,
                    seq: 0,
                    sketch_id: if wrong == 4 { 9 } else { 3 },
                    rows,
                    width,
                    op,
                    columns,
                    switch: (r.u8() % 6) as u32,
                    epoch: (r.u8() % 4) as u32,
                    column: (r.u8() % 72) as u32,
                    cells: &cells[..n],
                };
                rep.emit(&mut buf).expect("a valid report")
            }
        };
        if len > 0 {
            let d = [Datagram {
                src,
                dst,
                ip: None,
                payload: &buf[..len],
            }];
            p.handle_reports(now, &d, &mut tx);
            datagrams += 1;
        }
        let c = p.counters();
        assert_eq!(c.rx_datagrams, datagrams);
        assert_eq!(c.rx_datagrams, c.translated + c.dropped(), "{c:?}");
        for (dest, payload) in tx.iter_payloads() {
            if dest.port() == dta_proto::consts::DTA_NACK_PORT {
                // Raw datagrams may be retransmittable reports of other primitives, whose
                // sequence gaps are NACKed in their own formats.
                match NackRepr::parse(payload) {
                    Ok(NackRepr::SketchColumn {
                        sketch_id, switch, ..
                    }) => assert!(sketch_id == 3 && switch < 6),
                    Ok(_) => {}
                    Err(e) => panic!("a malformed NACK: {e}"),
                }
                continue;
            }
            let pkt = RocePacket::parse(payload).expect("a well-formed frame");
            let reth = pkt.reth.expect("a WRITE");
            let at = reth.va - BASE;
            assert!(at + pkt.payload.len() as u64 <= layout.region_len());
            // A batch, or the QP's zero-length probe (nothing ACKs here, so timeouts probe).
            assert!(pkt.payload.is_empty() || pkt.payload.len() == layout.batch_len());
        }
        tx.clear();
    }
});
