//! What the RNIC itself reads of an Append ring: its batch trailers.
//!
//! A sequenced Append list ends every batch slot in a trailer (sequence number and entry
//! count, [`AppendLayout::decode_trailer`]) written in the same RDMA WRITE after the entries.
//! When a translator (re)connects over RDMA_CM, the listener reads every trailer of every list
//! once and tells it the batch number each list continues at ([`list_heads`]), so a restarted
//! translator never overwrites a batch before the ring is due to lap it. The query engine's
//! tail readers (`dta_collector::query::append`) read the same trailers through
//! [`trailer`] and [`newest_seq`].
//!
//! Owns: reading trailers out of a [`Region`]. May not: write a region, or know about stores
//! and queries.

use dta_proto::geometry::AppendGeometry;
use dta_proto::layout::{AppendFormat, AppendLayout};

use crate::memory::Region;

/// The trailer of batch slot `slot` of the list whose ring starts at byte `base` of `region`:
/// (sequence number, entry count), or `None` if the slot was never written, the layout has no
/// trailers, or the offset lies outside the region.
#[inline]
pub fn trailer(region: &Region, layout: AppendLayout, base: u64, slot: u32) -> Option<(u64, u16)> {
    let off = base + layout.trailer_offset(slot)?;
    let v = region.load_u64_acquire(off).ok()?;
    layout.decode_trailer(v.to_le_bytes())
}

/// The newest batch sequence number in the list's ring (0 if none, and on a `reference`
/// list, which has no trailers), by scanning every trailer.
pub fn newest_seq(region: &Region, layout: AppendLayout, base: u64) -> u64 {
    if layout.format() != AppendFormat::Sequenced {
        return 0;
    }
    (0..layout.batch_slots())
        .filter_map(|s| trailer(region, layout, base, s))
        .map(|(seq, _)| seq)
        .max()
        .unwrap_or(0)
}

/// The next batch number of every list of an Append store: its newest trailer's number + 1
/// (1 for a list never written). Reads every trailer of every list once.
pub fn list_heads(region: &Region, a: &AppendGeometry) -> Vec<u64> {
    (0..a.lists)
        .map(|l| (newest_seq(region, a.layout, a.list_offset(l)) + 1).min(AppendLayout::MAX_SEQ))
        .collect()
}
