use super::*;

fn desc(name: &str, offset: u64, entries: u32) -> BlockDesc {
    BlockDesc {
        name: name.into(),
        offset,
        entries,
        kind: MetricKind::Counter,
        interval_ms: 100,
    }
}

fn control(descs: &[BlockDesc], region_len: u64) -> Vec<u8> {
    let h = ControlHeader {
        blocks: descs.len() as u16,
        generation: 7,
        region_len,
    };
    let mut c = h.encode().to_vec();
    for d in descs {
        c.extend_from_slice(&d.encode().unwrap());
    }
    c
}

#[test]
fn region_records_round_trip_and_damaged_ones_are_refused() {
    let r = RegionRecord {
        addr: 0x7f00_1234_5000,
        len: 1 << 20,
        rkey: 0xABCD_EF01,
        verify_icrc: true,
        pmtu: 1024,
    };
    let b = r.encode();
    assert_eq!(RegionRecord::decode(&b), Ok(r));
    assert_eq!(RegionRecord::decode(&b[..63]), Err(ZeroError::Truncated));
    for at in [0usize, 4] {
        let mut x = b;
        x[at] ^= 1;
        assert_eq!(RegionRecord::decode(&x), Err(ZeroError::BadMagic));
    }
    for at in [5usize, 9, 29, 40, 61] {
        let mut x = b;
        x[at] ^= 2;
        assert_eq!(
            RegionRecord::decode(&x),
            Err(ZeroError::Malformed),
            "byte {at}"
        );
    }
}

#[test]
fn control_areas_round_trip_and_hostile_ones_are_refused() {
    let ds = vec![desc("net/eth0", 256, 16), desc("cpu", 512, 10)];
    let c = control(&ds, 4096);
    let (h, back) = decode_control(&c).unwrap();
    assert_eq!((h.blocks, h.generation, h.region_len), (2, 7, 4096));
    assert_eq!(back, ds);
    assert_eq!(decode_control(&c[..100]), Err(ZeroError::Truncated));
    let mut bad = c.clone();
    bad[4] = 3;
    assert_eq!(decode_control(&bad), Err(ZeroError::BadMagic));
    let place = |ds: &[BlockDesc]| decode_control(&control(ds, 4096)).err();
    // Unaligned, inside the control area, beyond the region, overlapping, overflowing.
    assert_eq!(place(&[desc("a", 260, 1)]), Some(ZeroError::BadPlacement));
    assert_eq!(place(&[desc("a", 64, 1)]), Some(ZeroError::BadPlacement));
    assert_eq!(place(&[desc("a", 4088, 1)]), Some(ZeroError::BadPlacement));
    assert_eq!(
        place(&[desc("a", 256, 16), desc("b", 384, 1)]),
        Some(ZeroError::BadPlacement)
    );
    assert_eq!(
        place(&[desc("a", u64::MAX - 7, 1)]),
        Some(ZeroError::BadPlacement)
    );
    // Entries 0 or too many, an unknown kind, a name that is not UTF-8.
    for (at, v) in [(48usize, 0u8), (52, 9), (0, 0xFF)] {
        let mut d = desc("x", 256, 4).encode().unwrap();
        if at == 48 {
            d[48..52].fill(0);
        } else if at == 52 {
            d[52] = v;
        } else {
            d[0] = v;
        }
        assert_eq!(BlockDesc::decode(&d), Err(ZeroError::Malformed));
    }
    let mut d = desc("x", 256, 4).encode().unwrap();
    d[48..52].copy_from_slice(&(MAX_ENTRIES + 1).to_le_bytes());
    assert_eq!(BlockDesc::decode(&d), Err(ZeroError::Malformed));
    assert_eq!(desc(&"n".repeat(41), 256, 1).encode(), None);
}

/// Every way a READ can interleave with one update (each 8-byte word from before or after
/// it, in any combination the writer's order allows or not) is either the old snapshot,
/// the new one, or refused: never a mix.
#[test]
fn a_snapshot_is_the_old_values_the_new_ones_or_refused() {
    let old: Vec<u64> = (0..5).map(|i| 100 + i).collect();
    let new: Vec<u64> = (0..5).map(|i| 200 + i * 3).collect();
    let len = block_len(5);
    let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
    encode_block(10, 5_000_000_000, &old, &mut a);
    encode_block(12, 6_000_000_000, &new, &mut b);
    // The in-progress state: begin odd, values partly new.
    let words = len / 8;
    let mut accepted = 0;
    for mask in 0u32..(1 << words) {
        let mut m = vec![0u8; len];
        for w in 0..words {
            let src = if mask & (1 << w) != 0 { &b } else { &a };
            m[8 * w..8 * w + 8].copy_from_slice(&src[8 * w..8 * w + 8]);
        }
        match verify_block(&m, 5) {
            Ok(s) => {
                let v: Vec<u64> = s.iter().collect();
                assert!(
                    (s.seq == 10 && s.sampled_ns == 5_000_000_000 && v == old)
                        || (s.seq == 12 && s.sampled_ns == 6_000_000_000 && v == new),
                    "mask {mask:#x}: a mixed snapshot {v:?} at {}",
                    s.sampled_ns
                );
                accepted += 1;
            }
            Err(e) => assert!(matches!(e, ZeroError::InProgress | ZeroError::Torn)),
        }
    }
    assert_eq!(accepted, 2, "exactly the two whole snapshots");
    let mut odd = a.clone();
    odd[0..8].copy_from_slice(&11u64.to_le_bytes());
    assert_eq!(verify_block(&odd, 5), Err(ZeroError::InProgress));
    assert_eq!(verify_block(&a[..len - 1], 5), Err(ZeroError::Truncated));
    let s = verify_block(&a, 5).unwrap();
    assert_eq!((s.value(4), s.value(5)), (Some(104), None));
    // CRC-32C (check value of "123456789": 0xE3069283) over seq, count, sample time and
    // values.
    assert_eq!(CRC32C.checksum(b"123456789"), 0xE306_9283);
    let mut bytes = 12u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&5u32.to_le_bytes());
    bytes.extend_from_slice(&6_000_000_000u64.to_le_bytes());
    new.iter()
        .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    assert_eq!(block_crc(12, 5, &bytes[12..]), CRC32C.checksum(&bytes));
    // Both sequence words new but a value torn: the checksum catches it.
    let mut t = b.clone();
    t[24..32].copy_from_slice(&a[24..32]);
    assert_eq!(verify_block(&t, 5), Err(ZeroError::Torn));
}

/// A version-2 block written byte by byte from the layout in the module documentation:
/// the sample time sits after the entries count and is sealed by the CRC with the values,
/// so a snapshot cannot pair one sample's values with another's time.
#[test]
fn a_block_by_hand_carries_its_sealed_sample_time() {
    let mut blk = Vec::new();
    blk.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]); // begin = 4
    blk.extend_from_slice(&[0; 4]); // crc, below
    blk.extend_from_slice(&[2, 0, 0, 0]); // entries = 2
    blk.extend_from_slice(&[0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01]); // sampled_ns
    blk.extend_from_slice(&[0x2a, 0, 0, 0, 0, 0, 0, 0]); // value 0 = 42
    blk.extend_from_slice(&[0xff; 8]); // value 1 = u64::MAX
    blk.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]); // end = 4
                                                      // CRC-32C of begin (8 LE bytes) ‖ entries ‖ sampled_ns ‖ values.
    let mut sealed = blk[0..8].to_vec();
    sealed.extend_from_slice(&blk[12..40]);
    let crc = CRC32C.checksum(&sealed);
    blk[8..12].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(blk.len(), block_len(2));
    let s = verify_block(&blk, 2).unwrap();
    assert_eq!(
        (s.seq, s.sampled_ns, s.value(0), s.value(1)),
        (4, 0x0102_0304_0506_0708, Some(42), Some(u64::MAX))
    );
    let mut out = vec![0u8; block_len(2)];
    encode_block(4, 0x0102_0304_0506_0708, &[42, u64::MAX], &mut out);
    assert_eq!(out, blk, "the encoder writes the same bytes");
    // Any bit of the sample time changed: torn, never a snapshot at another time.
    for bit in 0..64 {
        let mut x = blk.clone();
        x[16 + bit / 8] ^= 1 << (bit % 8);
        assert_eq!(verify_block(&x, 2), Err(ZeroError::Torn), "bit {bit}");
    }
    // A version-1 region (no sample times) is refused, not misread.
    let mut h = ControlHeader {
        blocks: 0,
        generation: 1,
        region_len: 4096,
    }
    .encode();
    assert_eq!(h[4], 2);
    h[4] = 1;
    assert_eq!(ControlHeader::decode(&h), Err(ZeroError::BadMagic));
}
