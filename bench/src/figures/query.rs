//! `query` (Fig. 15): Key-Write query success against load factor, next to the formula.

use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_proto::analysis::keywrite_p_empty;
use dta_proto::batch::Datagram;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};
use serde::Serialize;
use serde_json::json;

use super::{machine, write, FigOptions};
use crate::gen::{Kind, Mix, Scenario, TRANSLATOR_REPORTS};
use crate::replay::{MemOptions, Rig};
use crate::workload::Flows;

/// Key-Write query outcome counts at one load.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueryPoint {
    /// Redundancy N.
    pub n: u8,
    /// Keys written / slots.
    pub load: f64,
    /// Keys written (and queried).
    pub keys: u64,
    /// Fraction answered with the value written.
    pub success: f64,
    /// Fraction answered empty.
    pub empty: f64,
    /// Fraction answered with a conflict.
    pub conflict: f64,
    /// Fraction answered with a wrong value (must be ~0).
    pub wrong: f64,
    /// The formula's success bound: 1 − mean over keys of p_empty(α_key, N, 32), where α_key is
    /// the load written after the key.
    pub formula_success: f64,
}

/// Writes `keys` distinct Key-Write reports through a rig into `2^slots_log2` slots with
/// redundancy `n`, then queries every key.
pub fn query_point(n: u8, slots_log2: u32, keys: u64, seed: u64) -> Result<QueryPoint, String> {
    let sc = Scenario {
        mix: Mix::only(Kind::KeyWrite),
        redundancy: n,
        slots_log2,
        ..Scenario::default()
    };
    let mut rig = Rig::new(
        &sc,
        0,
        1,
        &MemOptions {
            pin: false,
            ..MemOptions::default()
        },
    )?;
    let flows = Flows { seed, shape: 1.3 };
    let value = |i: u64| {
        let mut v = [0u8; 20];
        v[..8].copy_from_slice(&i.to_be_bytes());
        v[8..16].copy_from_slice(&crate::workload::mix(i ^ seed).to_be_bytes());
        v
    };
    let profile = Profile::Extended;
    let mut bufs = vec![[0u8; 64]; 64];
    let mut lens = [0usize; 64];
    let mut i = 0u64;
    while i < keys {
        let m = (keys - i).min(64) as usize;
        for j in 0..m {
            let r = Report {
                header: ReportHeader {
                    profile,
                    immediate: false,
                    retransmittable: false,
                    seq: Some((i + j as u64) as u32),
                    priority: Priority::Medium,
                },
                primitive: Primitive::KeyWrite {
                    redundancy: n,
                    key: Key::new(&flows.tuple(i + j as u64)).expect("13 bytes"),
                    value: Value::new(&value(i + j as u64)).expect("20 bytes"),
                },
            };
            lens[j] = r.emit(profile, &mut bufs[j]).map_err(|e| e.to_string())?;
        }
        let views: Vec<Datagram<'_>> = (0..m)
            .map(|j| Datagram {
                src: TRANSLATOR_REPORTS,
                dst: TRANSLATOR_REPORTS,
                ip: None,
                payload: &bufs[j][..lens[j]],
            })
            .collect();
        rig.feed(1_000_000 + i, &views);
        i += m as u64;
    }
    rig.flush(1_000_000 + keys);
    let st = rig.store("paths").ok_or("no paths store")?;
    let view = st.keywrite().ok_or("paths is not Key-Write")?;
    let (mut ok, mut empty, mut conflict, mut wrong, mut predicted) = (0u64, 0u64, 0u64, 0u64, 0.0);
    for i in 0..keys {
        let key = Key::new(&flows.tuple(i)).expect("13 bytes");
        match view.query(&key, n as usize, Vote::Plurality) {
            KeyWriteAnswer::Value { value: v, .. } => {
                if v.as_bytes()[..20] == value(i) {
                    ok += 1;
                } else {
                    wrong += 1;
                }
            }
            KeyWriteAnswer::Empty => empty += 1,
            KeyWriteAnswer::Conflict { .. } => conflict += 1,
        }
        predicted += keywrite_p_empty(
            (keys - 1 - i) as f64 / view.layout.slots() as f64,
            n as u32,
            32,
        );
    }
    let k = keys.max(1) as f64;
    Ok(QueryPoint {
        n,
        load: keys as f64 / view.layout.slots() as f64,
        keys,
        success: ok as f64 / k,
        empty: empty as f64 / k,
        conflict: conflict as f64 / k,
        wrong: wrong as f64 / k,
        formula_success: 1.0 - predicted / k,
    })
}

/// `query` (Fig. 15): Key-Write query success against load factor, measured and formula.
pub fn query(o: &FigOptions) -> Result<serde_json::Value, String> {
    let slots_log2 = 18;
    let loads = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0];
    let mut pts = Vec::new();
    for n in [1u8, 2, 4] {
        for &a in &loads {
            let keys = (a * (1u64 << slots_log2) as f64) as u64;
            let p = query_point(n, slots_log2, keys, 77)?;
            if o.verbose {
                eprintln!(
                    "  Key-Write N={n} load {a:.2}: success {:.4} (formula {:.4}) empty {:.4} conflict {:.4} wrong {}",
                    p.success, p.formula_success, p.empty, p.conflict, p.wrong
                );
            }
            pts.push(p);
        }
    }
    let v = json!({"figure": "query", "paper": "Fig. 15", "machine": machine(), "slots": 1u64 << slots_log2, "points": pts});
    write(&o.out, "query", &v)?;
    Ok(v)
}
