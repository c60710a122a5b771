proptest::proptest! {
    #[test]
    fn the_avx2_merge_equals_the_portable_one(
        dst in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..300),
        cells in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
        which in 0usize..3) {
        let op = [MergeOp::Sum, MergeOp::Max, MergeOp::SignedSum][which];
        let n = dst.len().min(cells.len() / 4);
        let (mut a, mut b) = (dst[..n].to_vec(), dst[..n].to_vec());
        merge_words(op, &mut a, &cells[..n * 4]);
        if wide::merge_words(op, &mut b, &cells[..n * 4]) {
            proptest::prop_assert_eq!(a, b);
        }
    }
}
proptest::proptest! {
    /// Both paths of `merge_wire_cells` (AVX2 where the CPU has it, and the portable one)
    /// against the cells read one by one: big-endian, a signed sum's narrow cells
    /// sign-extended, and as many merged as both slices hold (the lengths disagree here).
    #[test]
    fn wire_cells_merge_as_read_one_by_one(
        dst in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..300),
        cells in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
        which in 0usize..3,
        width in 0usize..3) {
        let op = [MergeOp::Sum, MergeOp::Max, MergeOp::SignedSum][which];
        let w = CellWidth::new([1, 2, 4][width]).unwrap();
        let bits = 8 * w.bytes() as u32;
        let mut want = dst.clone();
        for (d, c) in want.iter_mut().zip(cells.chunks_exact(w.bytes())) {
            let raw = c.iter().fold(0u32, |a, &b| a << 8 | u32::from(b));
            let s = if op == MergeOp::SignedSum && bits < 32 {
                (((raw << (32 - bits)) as i32) >> (32 - bits)) as u32
            } else {
                raw
            };
            *d = merge_one(op, w.max(), *d, s);
        }
        let (mut fast, mut portable) = (dst.clone(), dst);
        merge_wire_cells(op, w, &mut fast, &cells);
        merge_wire_cells_portable(op, w, &mut portable, &cells);
        proptest::prop_assert_eq!(&fast, &want);
        proptest::prop_assert_eq!(&portable, &want);
    }
}
use super::hash::HLL_ENGINE;
use super::merge::{merge_wire_cells_portable, merge_words, wide};
use super::*;
use crate::crc::Crc32;
use crate::hash::replica_poly;

fn cm() -> SketchShape {
    SketchShape::new(SketchKind::CountMin, 4, 1024, 4).unwrap()
}

#[test]
fn shapes_and_layouts_are_checked() {
    assert!(SketchShape::new(SketchKind::CountMin, 0, 1024, 4).is_err());
    assert!(SketchShape::new(SketchKind::CountMin, 9, 1024, 4).is_err());
    assert!(SketchShape::new(SketchKind::CountMin, 4, 1000, 4).is_err());
    assert!(SketchShape::new(SketchKind::CountMin, 4, 1024, 3).is_err());
    assert!(SketchShape::new(SketchKind::CountMin, 4, 1024, 1).is_err());
    assert!(SketchShape::new(SketchKind::HyperLogLog, 2, 1024, 1).is_err());
    assert!(SketchShape::new(SketchKind::HyperLogLog, 1, 8, 1).is_err());
    assert!(SketchShape::new(SketchKind::HyperLogLog, 1, 1 << 17, 1).is_err());
    let l = SketchLayout::new(cm(), 32, 2).unwrap();
    assert_eq!(l.column_stride(), 8 + 16 + 8);
    assert_eq!(l.batch_len(), 32 * 32);
    assert_eq!(l.region_len(), 64 + 2 * 1024 * 32);
    assert_eq!(l.slot_offset(5), 64 + 1024 * 32);
    assert_eq!(l.batch_offset(4, 2), 64 + 64 * 32);
    assert_eq!(l.tail_offset(4, 2), 64 + 2 * 32 + 24);
    assert!(
        SketchLayout::new(cm(), 64, 2).is_err(),
        "64 x 32 B > 1024 B"
    );
    assert!(SketchLayout::new(cm(), 3, 2).is_err());
    assert!(SketchLayout::new(cm(), 32, 0).is_err());
    assert!(SketchLayout::new(cm(), 32, 17).is_err());
    let hll = SketchShape::new(SketchKind::HyperLogLog, 1, 4096, 1).unwrap();
    let l = SketchLayout::new(hll, 32, 2).unwrap();
    assert_eq!(l.column_stride(), 8 + 4 + 8);
    let (back, id) = SketchLayout::decode_header(&l.encode_header(7)).unwrap();
    assert_eq!((back, id), (l, 7));
    let mut bad = l.encode_header(7);
    bad[6] = 0;
    assert_eq!(SketchLayout::decode_header(&bad), None);
}

#[test]
fn records_round_trip() {
    let cs = SketchShape::new(SketchKind::Count, 3, 64, 4).unwrap();
    let l = SketchLayout::new(cs, 8, 1).unwrap();
    let mut rec = vec![0xAAu8; l.column_stride() as usize];
    l.encode_record(9, 3, 4, &[1, (-5i32) as u32, u32::MAX], &mut rec);
    let mut cells = [0u32; 3];
    assert_eq!(l.decode_record(&rec, &mut cells), (9, 3, 4));
    assert_eq!(cells, [1, (-5i32) as u32, u32::MAX]);
    // Written by hand from the text (module docs, PROTOCOL.md §9): head, 3 cells LE, tail.
    assert_eq!(
        rec,
        [
            9, 0, 0, 0, 3, 0, 4, 0, //
            1, 0, 0, 0, 0xFB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, //
            9, 0, 0, 0, 3, 0, 4, 0,
        ]
    );
    let head = RecordHead {
        epoch: 9,
        merged: 3,
        expected: 4,
    };
    assert_eq!(l.decode_whole(&rec, &mut cells), Some(head));
    // The head of a newer version over the rest of the old one: in transition.
    let mut torn = rec.clone();
    torn[4] = 4;
    assert_eq!(l.decode_whole(&torn, &mut cells), None);
    let mut torn = rec.clone();
    torn[20] = 11; // the tail of epoch 11 (another epoch reusing the slot)
    assert_eq!(l.decode_whole(&torn, &mut cells), None);
    let hll = SketchLayout::new(
        SketchShape::new(SketchKind::HyperLogLog, 1, 16, 1).unwrap(),
        4,
        1,
    )
    .unwrap();
    let mut rec = vec![0xAAu8; 20];
    hll.encode_record(1, 1, 1, &[17], &mut rec);
    assert_eq!(&rec[8..12], &[17, 0, 0, 0], "padding is zeroed");
    assert_eq!(&rec[12..], &rec[..8], "the tail repeats the head");
}

#[test]
fn merges_saturate_take_max_and_sign_extend() {
    let mut d = [u32::MAX - 1, 5, 0, 7];
    merge_lanes(MergeOp::Sum, u32::MAX, &mut d, &[5, 5, 0, 1]);
    assert_eq!(d, [u32::MAX, 10, 0, 8]);
    let mut d = [250, 5];
    merge_lanes(MergeOp::Sum, 255, &mut d, &[10, 5]);
    assert_eq!(d, [255, 10]);
    let mut d = [3, 9];
    merge_lanes(MergeOp::Max, 255, &mut d, &[4, 2]);
    assert_eq!(d, [4, 9]);
    let mut d = [(-3i32) as u32];
    merge_lanes(MergeOp::SignedSum, u32::MAX, &mut d, &[5]);
    assert_eq!(d, [2]);
    // Wire cells are big-endian; narrow signed cells are sign-extended.
    let mut d = [1u32, 2];
    merge_wire_cells(
        MergeOp::Sum,
        CellWidth::new(4).unwrap(),
        &mut d,
        &[0, 0, 1, 0, 255, 255, 255, 255],
    );
    assert_eq!(d, [257, u32::MAX]);
    let mut d = [10u32];
    merge_wire_cells(
        MergeOp::SignedSum,
        CellWidth::new(1).unwrap(),
        &mut d,
        &[0xFF],
    );
    assert_eq!(d, [9]);
    let mut d = [10u32];
    merge_wire_cells(MergeOp::Max, CellWidth::new(1).unwrap(), &mut d, &[0x0C]);
    assert_eq!(d, [12]);
    let mut d = [0xFFF0u32];
    merge_wire_cells(MergeOp::Sum, CellWidth::new(2).unwrap(), &mut d, &[0, 0x20]);
    assert_eq!(d, [0xFFFF]);
}

#[test]
fn count_min_never_undercounts_and_merge_equals_central() {
    let mut parts = vec![Sketch::new(cm()); 3];
    let mut central = Sketch::new(cm());
    let mut truth = std::collections::HashMap::new();
    for i in 0..5000u32 {
        let k = Key::new(&(i % 700).to_be_bytes()).unwrap();
        parts[(i % 3) as usize].update(&k, 1 + i % 5);
        central.update(&k, 1 + i % 5);
        *truth.entry(i % 700).or_insert(0i64) += (1 + i % 5) as i64;
    }
    let mut merged = Sketch::new(cm());
    for p in &parts {
        merged.merge(p);
    }
    assert_eq!(merged, central);
    for (k, t) in truth {
        let est = merged.point(&Key::new(&k.to_be_bytes()).unwrap()).unwrap();
        assert!(est >= t, "key {k}: {est} < {t}");
    }
}

#[test]
fn count_sketch_is_unbiased_enough_and_merges() {
    let shape = SketchShape::new(SketchKind::Count, 5, 1024, 4).unwrap();
    let mut a = Sketch::new(shape);
    let mut b = Sketch::new(shape);
    let mut c = Sketch::new(shape);
    for i in 0..2000u32 {
        let k = Key::new(&i.to_be_bytes()).unwrap();
        let n = if i < 10 { 1000 } else { 1 };
        if i % 2 == 0 {
            a.update(&k, n)
        } else {
            b.update(&k, n)
        }
        c.update(&k, n);
    }
    a.merge(&b);
    assert_eq!(a, c);
    for i in 0..10u32 {
        let est = a.point(&Key::new(&i.to_be_bytes()).unwrap()).unwrap();
        assert!((est - 1000).abs() < 60, "heavy key {i}: {est}");
    }
}

#[test]
fn hll_estimates_within_bounds() {
    let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap();
    for n in [10u32, 1000, 100_000] {
        let mut s = Sketch::new(shape);
        for i in 0..n {
            s.update(
                &Key::new(&(i.wrapping_mul(2_654_435_761)).to_be_bytes()).unwrap(),
                1,
            );
        }
        let e = s.cardinality().unwrap();
        let rel = (e - n as f64).abs() / n as f64;
        assert!(rel < 3.0 * 1.04 / 32.0, "n {n}: estimate {e}");
    }
    let (_, rank) = SketchHasher::new(shape).hll(&Key::new(&[1]).unwrap());
    assert!((1..=23).contains(&rank));
}

/// The Tofino profile: columns and signs are the bare CRCs, the header carries the
/// profile, and HyperLogLog over structured keys (consecutive integers, one /16 of
/// addresses, 5-tuples of one host pair) stays within 3 standard errors, where the CRC
/// alone is far off (checked too, so the tabulation is what fixes it).
#[test]
fn tofino_profile_hashes_as_a_switch_does() {
    let shape = cm().with_hash(SketchHash::Tofino);
    let h = SketchHasher::new(shape);
    let key = Key::new(&[10, 0, 0, 1, 10, 0, 0, 2, 6, 0x1F, 0x90, 0x00, 0x50]).unwrap();
    for r in 0..4u8 {
        let crc = Crc32::new(replica_poly(r as usize)).checksum(key.as_bytes());
        assert_eq!(h.column(&key, r), crc & 1023);
        assert_ne!(
            SketchHasher::new(cm()).column(&key, r),
            h.column(&key, r),
            "the independent profile differs (row {r})"
        );
    }
    assert_eq!(
        TAB[0][0], 0x1253_8F4E,
        "the tables P4 carries (dta_constants.p4)"
    );
    assert_eq!(tabulate(0), TAB[0][0] ^ TAB[1][0] ^ TAB[2][0] ^ TAB[3][0]);
    assert_eq!(
        tabulate(0x0102_0304),
        TAB[0][4] ^ TAB[1][3] ^ TAB[2][2] ^ TAB[3][1]
    );
    let l = SketchLayout::new(shape, 32, 2).unwrap();
    let (back, _) = SketchLayout::decode_header(&l.encode_header(3)).unwrap();
    assert_eq!(back.shape().hash, SketchHash::Tofino);
    let mut bad = l.encode_header(3);
    bad[30] = 9;
    assert_eq!(SketchLayout::decode_header(&bad), None, "unknown profile");

    let hll = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap();
    let bound = 3.0 * 1.04 / 32.0;
    let crc_only_rank = |key: &Key| {
        let x = HLL_ENGINE.checksum(key.as_bytes());
        let rest = x << 10;
        (
            x >> 22,
            if rest == 0 {
                23
            } else {
                rest.leading_zeros() + 1
            },
        )
    };
    type KeyOf = fn(u32) -> Vec<u8>;
    let consecutive: KeyOf = |i| i.to_be_bytes().to_vec();
    let subnet: KeyOf = |i| {
        (0x0A00_0000 | (i & 0xFFFF) | (i >> 16) << 24)
            .to_be_bytes()
            .to_vec()
    };
    let ports: KeyOf = |i| {
        let mut k = vec![10, 0, 0, 1, 10, 0, 0, 2, 6];
        k.extend_from_slice(&(i as u16).to_be_bytes());
        k.extend_from_slice(&((i >> 16) as u16 + 80).to_be_bytes());
        k
    };
    let sets = [
        ("consecutive", consecutive),
        ("one /16", subnet),
        ("ports", ports),
    ];
    let mut crc_far = 0;
    for (name, key) in &sets {
        let n = 20_000u32;
        let mut tof = Sketch::new(hll.with_hash(SketchHash::Tofino));
        let mut bare = Sketch::new(hll);
        for i in 0..n {
            let k = Key::new(&key(i)).unwrap();
            tof.update(&k, 1);
            let (idx, rank) = crc_only_rank(&k);
            let c = &mut bare.cells_mut()[idx as usize];
            *c = (*c).max(rank);
        }
        let rel = |s: &Sketch| (s.cardinality().unwrap() - n as f64).abs() / n as f64;
        assert!(
            rel(&tof) < bound,
            "{name}: tabulated estimate off by {}",
            rel(&tof)
        );
        crc_far += (rel(&bare) > bound) as u32;
    }
    assert!(crc_far >= 1, "the CRC alone is biased on structured keys");
}

#[test]
fn epochs_compare_serially() {
    assert!(epoch_after(1, 0));
    assert!(epoch_after(0, u32::MAX));
    assert!(!epoch_after(5, 5));
    assert!(!epoch_after(4, 5));
}

proptest::proptest! {
    /// The per-shape batch encoder writes the bytes of the per-record one, for every width,
    /// row count and batch, over a scratch that starts dirty.
    #[test]
    fn batch_records_equal_single_records(
        wi in 0usize..3,
        rows in 1u8..=8,
        batch_log in 0u32..5,
        epoch in proptest::prelude::any::<u32>(),
        expected in proptest::prelude::any::<u16>(),
        seed in proptest::prelude::any::<u64>()) {
        // Every width and row count, also those `SketchShape::new` refuses (the fallback).
        let shape = SketchShape {
            kind: SketchKind::CountMin,
            rows,
            columns: 64,
            width: CellWidth::new([1u8, 2, 4][wi]).unwrap(),
            hash: SketchHash::Independent,
        };
        let batch = 1u32 << batch_log;
        let l = SketchLayout::new(shape, batch, 2).unwrap();
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = batch as usize;
        let merged: Vec<u16> = (0..n).map(|_| next() as u16).collect();
        let cells: Vec<u32> = (0..n * rows as usize).map(|_| next() as u32).collect();
        let stride = l.column_stride() as usize;
        let mut want = vec![0xA5u8; n * stride];
        for (i, rec) in want.chunks_exact_mut(stride).enumerate() {
            let cs = &cells[i * rows as usize..(i + 1) * rows as usize];
            l.encode_record(epoch, merged[i], expected, cs, rec);
        }
        let mut got = vec![0x5Au8; n * stride + 3];
        l.encode_records(epoch, expected, &merged, &cells, &mut got);
        proptest::prop_assert_eq!(&got[..n * stride], &want[..]);
        proptest::prop_assert_eq!(&got[n * stride..], &[0x5Au8; 3][..], "nothing past the records");
    }
}
