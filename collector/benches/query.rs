//! Query throughput on one core: Key-Write (N = 2, the papers' 7.1 M/s on 4 cores is the
//! yardstick), Key-Increment, Postcarding and Append polling.
//!
//! `cargo bench -p dta-collector --bench query`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use dta_collector::memory::Region;
use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::counter::CounterView;
use dta_collector::query::keywrite::{KeyWriteView, Vote};
use dta_collector::query::postcard::{encode_chunk, PostcardView, ValueSet};
use dta_proto::hash::{HashProfile, KeyHasher, PostcardHasher, MAX_REDUNDANCY};
use dta_proto::layout::{
    AppendFormat, AppendLayout, CounterLayout, KeyWriteLayout, PostcardLayout,
};
use dta_proto::Key;

const SLOTS: u32 = 1 << 20;
const KEYS: u32 = 1 << 16;
/// Keys written into a Key-Write store: alpha = 0.1 of its slots.
const WRITTEN: u32 = SLOTS / 10;

fn key(i: u32) -> Key {
    let mut k = [0u8; 13];
    k[..4].copy_from_slice(&(0x0A00_0000 | i).to_be_bytes());
    k[4..8].copy_from_slice(&i.wrapping_mul(2654435761).to_be_bytes());
    Key::new(&k).unwrap()
}

fn keywrite_store(slot_size: u32) -> (Region, KeyWriteLayout, KeyHasher) {
    let layout = KeyWriteLayout::new(SLOTS, slot_size).unwrap();
    let hasher = KeyHasher::new(HashProfile::Independent, SLOTS).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, true).unwrap();
    let mut slot = [0u8; 64];
    let mut s = [0u32; MAX_REDUNDANCY];
    // alpha = 0.1: 10% of the slot count in keys, N = 2 each.
    for i in 0..WRITTEN {
        let k = key(i);
        let cs = hasher.checksum_and_slots(&k, 2, &mut s);
        let v = [i as u8; 60];
        layout.encode_slot(cs, &v[..layout.value_width().min(20)], &mut slot);
        for &x in &s[..2] {
            region
                .write(layout.slot_offset(x), &slot[..slot_size as usize])
                .unwrap();
        }
    }
    (region, layout, hasher)
}

fn keywrite(c: &mut Criterion) {
    let keys: Vec<Key> = (0..WRITTEN).map(key).collect();
    let mut g = c.benchmark_group("keywrite");
    g.throughput(Throughput::Elements(WRITTEN as u64));
    for slot_size in [8u32, 32] {
        let (region, layout, hasher) = keywrite_store(slot_size);
        let view = KeyWriteView {
            region: &region,
            layout,
            hasher,
        };
        for n in [1usize, 2, 4] {
            g.bench_function(format!("query_n{n}_{slot_size}B"), |b| {
                b.iter(|| {
                    for k in &keys {
                        black_box(view.query(black_box(k), n, Vote::Plurality));
                    }
                })
            });
        }
    }
    g.finish();
}

fn counter(c: &mut Criterion) {
    let layout = CounterLayout::new(SLOTS).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, true).unwrap();
    let view = CounterView {
        region: &region,
        layout,
        hasher: KeyHasher::new(HashProfile::Independent, SLOTS).unwrap(),
    };
    let mut g = c.benchmark_group("counter");
    g.throughput(Throughput::Elements(KEYS as u64));
    g.bench_function("query_n2", |b| {
        b.iter(|| {
            for i in 0..KEYS {
                black_box(view.query(black_box(&key(i)), 2));
            }
        })
    });
    g.finish();
}

fn postcard(c: &mut Criterion) {
    let chunks = 1 << 18;
    let layout = PostcardLayout::new(chunks, 5).unwrap();
    let hasher = PostcardHasher::new(HashProfile::Independent, chunks, 1, 5).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, true).unwrap();
    let values = ValueSet::new(&[[0, (1 << 18) - 1]], HashProfile::Independent).unwrap();
    let mut buf = [0u8; 20];
    for i in 0..KEYS {
        let k = key(i);
        encode_chunk(&hasher, &k, &[i, i + 1, i + 2, i + 3], &mut buf).unwrap();
        for r in 0..2 {
            region
                .write(layout.chunk_offset(hasher.chunk(&k, r)), &buf)
                .unwrap();
        }
    }
    let view = PostcardView {
        region: &region,
        layout,
        hasher,
        values: &values,
    };
    let mut g = c.benchmark_group("postcard");
    g.throughput(Throughput::Elements(KEYS as u64));
    g.bench_function("query_n2_b5", |b| {
        b.iter(|| {
            for i in 0..KEYS {
                black_box(view.query(black_box(&key(i)), 2, 1));
            }
        })
    });
    g.finish();
}

fn append(c: &mut Criterion) {
    // One list of 4096 batches of 16 four-byte entries, full; a reader drains all of it.
    let layout = AppendLayout::new(AppendFormat::Sequenced, 16 * 4096, 4, 16).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, true).unwrap();
    let mut batch = vec![0u8; layout.stride() as usize];
    for s in 1..=4096u64 {
        for (i, e) in batch[..64].chunks_exact_mut(4).enumerate() {
            e.copy_from_slice(&((s as u32) << 4 | i as u32).to_le_bytes());
        }
        batch[64..].copy_from_slice(&layout.encode_trailer(s, 16));
        region
            .write(layout.batch_offset(layout.slot_for_seq(s)), &batch)
            .unwrap();
    }
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Elements(16 * 4096));
    g.bench_function("poll_entries_batch16", |b| {
        b.iter(|| {
            let mut r = ListReader::new(&region, layout, 0, Start::Seq(1));
            let mut sum = 0u64;
            r.poll(&region, usize::MAX, |_, e| sum += e[0] as u64);
            black_box(sum)
        })
    });
    g.finish();
}

/// CPU time of the calling thread, in seconds: on a shared machine wall-clock figures include
/// time the thread spent descheduled, so this report divides by the CPU time actually used.
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Key-Write queries per second of one core's CPU time (N = 1, 2, 4; 8- and 32-byte slots).
fn keywrite_cpu_time(_: &mut Criterion) {
    let keys: Vec<Key> = (0..WRITTEN).map(key).collect();
    for slot_size in [8u32, 32] {
        let (region, layout, hasher) = keywrite_store(slot_size);
        let view = KeyWriteView {
            region: &region,
            layout,
            hasher,
        };
        for n in [1usize, 2, 4] {
            let rounds = 20;
            let t0 = thread_cpu_secs();
            for _ in 0..rounds {
                for k in &keys {
                    black_box(view.query(black_box(k), n, Vote::Plurality));
                }
            }
            let secs = thread_cpu_secs() - t0;
            println!(
                "keywrite/cpu_time/query_n{n}_{slot_size}B: {:.2} M queries per CPU-second",
                (rounds * keys.len()) as f64 / secs / 1e6
            );
        }
    }
}

criterion_group!(
    benches,
    keywrite,
    counter,
    postcard,
    append,
    keywrite_cpu_time
);
criterion_main!(benches);
