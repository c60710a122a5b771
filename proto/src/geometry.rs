//! Store geometry: the one validated answer to "where in a store's region does a report go".
//!
//! A [`StoreMeta`] carries a store's layout parameters and its region (address, length). Every
//! party that writes or reads a store (the translator's primitives, the collector's stores and
//! queries, the corpus model, the demo, the figures, the RDMA self-test) turns it into layouts
//! and hashers. [`StoreGeometry::try_from`] does that once and checks what each party would
//! otherwise assume: the layout parameters are valid, the hashers accept them, everything the
//! layout addresses lies inside the region (`used_len() <= len`), and `addr + len` does not
//! overflow. After it succeeds, `addr + offset` for any offset the layouts produce from
//! in-range indices is inside the region, so per-packet code needs no further check.

use crate::hash::{HashProfile, KeyHasher, PostcardHasher};
use crate::layout::{AppendLayout, CounterLayout, KeyWriteLayout, LayoutError, PostcardLayout};
use crate::meta::{StoreKind, StoreMeta};
use crate::sketch::{SketchLayout, SketchShape};

/// Why a store's metadata does not describe a usable store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeometryError {
    /// The layout parameters are invalid.
    Layout(LayoutError),
    /// The hash profile does not accept the parameters (slot count, or hops for `reference`).
    Hash(&'static str),
    /// An Append store with no lists, a list stride shorter than one list, or list IDs that
    /// overflow.
    Lists(&'static str),
    /// The layout needs more bytes than the region has.
    RegionTooShort {
        /// Bytes the layout addresses.
        needed: u64,
        /// Bytes the region has.
        len: u64,
    },
    /// `addr + len` overflows the address space.
    AddressOverflow,
    /// An Append or Sketch store with a redundancy N (they write each entry once).
    AppendRedundancy,
}

impl core::fmt::Display for GeometryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GeometryError::Layout(e) => write!(f, "bad layout: {e}"),
            GeometryError::Hash(e) => write!(f, "bad hashing parameters: {e}"),
            GeometryError::Lists(e) => write!(f, "bad Append lists: {e}"),
            GeometryError::RegionTooShort { needed, len } => write!(
                f,
                "the layout needs {needed} bytes but the region has {len}"
            ),
            GeometryError::AddressOverflow => f.write_str("region address + length overflows"),
            GeometryError::AppendRedundancy => f.write_str(
                "an Append or Sketch store has no redundancy N (each entry is written once)",
            ),
        }
    }
}

impl std::error::Error for GeometryError {}

impl From<LayoutError> for GeometryError {
    fn from(e: LayoutError) -> Self {
        GeometryError::Layout(e)
    }
}

/// An Append store's lists: list `first_list + i` is a ring of `layout` at `i * list_stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendGeometry {
    /// One list's ring.
    pub layout: AppendLayout,
    /// Lists in the store.
    pub lists: u32,
    /// Global ID of the first list.
    pub first_list: u32,
    /// Bytes between the starts of consecutive lists (at least one ring).
    pub list_stride: u64,
}

impl AppendGeometry {
    /// The store-local index of global list `list`, if the store holds it.
    #[inline]
    pub fn local_list(&self, list: u32) -> Option<u32> {
        let i = list.wrapping_sub(self.first_list);
        (i < self.lists).then_some(i)
    }

    /// Region offset of store-local list `i`'s ring.
    #[inline]
    pub fn list_offset(&self, i: u32) -> u64 {
        i as u64 * self.list_stride
    }
}

/// A store's layout and hashers, validated against its region (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreGeometry {
    /// Key-Write slots.
    KeyWrite {
        /// Slot layout.
        layout: KeyWriteLayout,
        /// Slot and checksum hashes.
        hasher: KeyHasher,
    },
    /// Key-Increment counters.
    KeyIncrement {
        /// Counter layout.
        layout: CounterLayout,
        /// Slot hashes.
        hasher: KeyHasher,
    },
    /// Append lists.
    Append(AppendGeometry),
    /// Postcarding chunks.
    Postcard {
        /// Chunk layout.
        layout: PostcardLayout,
        /// Chunk and hop hashes (a one-entry translator cache: see
        /// [`PostcardHasher::with_cache_slots`]).
        hasher: PostcardHasher,
    },
    /// A merged sketch.
    Sketch {
        /// Memory layout (geometry, batch, epoch slots).
        layout: SketchLayout,
        /// The sketch ID the store serves.
        sketch_id: u16,
    },
}

impl StoreGeometry {
    /// The geometry `kind` describes, without a region to check it against (a collector
    /// sizing the region it is about to allocate: see [`StoreGeometry::used_len`]).
    pub fn of_kind(kind: &StoreKind) -> Result<StoreGeometry, GeometryError> {
        let key_hasher = |hash: HashProfile, slots: u32| {
            KeyHasher::new(hash, slots).ok_or(GeometryError::Hash("unsupported slot count"))
        };
        Ok(match *kind {
            StoreKind::KeyWrite {
                slots,
                slot_size,
                hash,
            } => StoreGeometry::KeyWrite {
                layout: KeyWriteLayout::new(slots, slot_size)?,
                hasher: key_hasher(hash, slots)?,
            },
            StoreKind::KeyIncrement { slots, hash } => StoreGeometry::KeyIncrement {
                layout: CounterLayout::new(slots)?,
                hasher: key_hasher(hash, slots)?,
            },
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                list_stride,
            } => {
                let layout = AppendLayout::new(format, capacity, entry_size, batch)?;
                if lists == 0 {
                    return Err(GeometryError::Lists("a store needs at least one list"));
                }
                if list_stride < layout.region_len() {
                    return Err(GeometryError::Lists("list stride shorter than one list"));
                }
                if first_list.checked_add(lists - 1).is_none() {
                    return Err(GeometryError::Lists("list IDs overflow 32 bits"));
                }
                if list_stride.checked_mul(lists as u64).is_none() {
                    return Err(GeometryError::Layout(LayoutError::TooLarge));
                }
                StoreGeometry::Append(AppendGeometry {
                    layout,
                    lists,
                    first_list,
                    list_stride,
                })
            }
            StoreKind::Postcard { chunks, hops, hash } => StoreGeometry::Postcard {
                layout: PostcardLayout::new(chunks, hops)?,
                hasher: PostcardHasher::new(hash, chunks, 1, hops).ok_or(GeometryError::Hash(
                    "chunks must be a power of two and the reference profile needs 5 hops",
                ))?,
            },
            StoreKind::Sketch {
                sketch_id,
                sketch,
                rows,
                columns,
                cell_width,
                batch,
                epochs,
                hash,
            } => StoreGeometry::Sketch {
                layout: SketchLayout::new(
                    SketchShape::new(sketch, rows, columns, cell_width)?.with_hash(hash),
                    batch,
                    epochs,
                )?,
                sketch_id,
            },
        })
    }

    /// Bytes of the region the layout addresses (from offset 0).
    pub fn used_len(&self) -> u64 {
        match self {
            StoreGeometry::KeyWrite { layout, .. } => layout.region_len(),
            StoreGeometry::KeyIncrement { layout, .. } => layout.region_len(),
            StoreGeometry::Append(a) => {
                // Checked in `of_kind`: no overflow.
                (a.lists as u64 - 1) * a.list_stride + a.layout.region_len()
            }
            StoreGeometry::Postcard { layout, .. } => layout.region_len(),
            StoreGeometry::Sketch { layout, .. } => layout.region_len(),
        }
    }

    /// The primitive's short name (as [`StoreKind::name`]).
    pub fn name(&self) -> &'static str {
        match self {
            StoreGeometry::KeyWrite { .. } => "keywrite",
            StoreGeometry::KeyIncrement { .. } => "keyincrement",
            StoreGeometry::Append(_) => "append",
            StoreGeometry::Postcard { .. } => "postcard",
            StoreGeometry::Sketch { .. } => "sketch",
        }
    }
}

impl TryFrom<&StoreMeta> for StoreGeometry {
    type Error = GeometryError;

    /// Validates `meta`'s layout against its region (see the module docs), and that an
    /// Append store claims no redundancy N.
    fn try_from(meta: &StoreMeta) -> Result<StoreGeometry, GeometryError> {
        let g = StoreGeometry::of_kind(&meta.kind)?;
        if meta.redundancy.is_some() && !meta.kind.has_redundancy() {
            return Err(GeometryError::AppendRedundancy);
        }
        let needed = g.used_len();
        if needed > meta.len {
            return Err(GeometryError::RegionTooShort {
                needed,
                len: meta.len,
            });
        }
        if meta.addr.checked_add(meta.len).is_none() {
            return Err(GeometryError::AddressOverflow);
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::AppendFormat;

    fn meta(kind: StoreKind, len: u64) -> StoreMeta {
        StoreMeta {
            name: "s".into(),
            addr: 0x7f00_0000_0000,
            len,
            rkey: 1,
            qps: vec![],
            redundancy: None,
            kind,
        }
    }

    #[test]
    fn a_layout_must_fit_its_region() {
        let kw = StoreKind::KeyWrite {
            slots: 1024,
            slot_size: 16,
            hash: HashProfile::Independent,
        };
        assert!(StoreGeometry::try_from(&meta(kw.clone(), 16 * 1024)).is_ok());
        assert_eq!(
            StoreGeometry::try_from(&meta(kw.clone(), 16 * 1024 - 1)),
            Err(GeometryError::RegionTooShort {
                needed: 16 * 1024,
                len: 16 * 1024 - 1
            })
        );
        let mut m = meta(kw, 16 * 1024);
        m.addr = u64::MAX - 100;
        assert_eq!(
            StoreGeometry::try_from(&m),
            Err(GeometryError::AddressOverflow)
        );
        let ctr = StoreKind::KeyIncrement {
            slots: 1 << 16,
            hash: HashProfile::Independent,
        };
        assert!(StoreGeometry::try_from(&meta(ctr.clone(), 8 << 16)).is_ok());
        assert!(StoreGeometry::try_from(&meta(ctr, (8 << 16) - 8)).is_err());
        let pc = StoreKind::Postcard {
            chunks: 1024,
            hops: 5,
            hash: HashProfile::Independent,
        };
        let g = StoreGeometry::try_from(&meta(pc.clone(), 32 * 1024)).unwrap();
        assert_eq!(g.used_len(), 32 * 1024);
        assert!(StoreGeometry::try_from(&meta(pc, 32 * 1024 - 4)).is_err());
    }

    #[test]
    fn append_lists_are_checked() {
        let kind = |lists, first_list, stride| StoreKind::Append {
            lists,
            first_list,
            capacity: 64,
            entry_size: 8,
            batch: 4,
            format: AppendFormat::Sequenced,
            list_stride: stride,
        };
        let one = AppendLayout::new(AppendFormat::Sequenced, 64, 8, 4)
            .unwrap()
            .region_len();
        let g = StoreGeometry::try_from(&meta(kind(4, 10, 4096), 4 * 4096)).unwrap();
        // The last list needs only its ring, not a whole stride.
        assert_eq!(g.used_len(), 3 * 4096 + one);
        let StoreGeometry::Append(a) = g else {
            panic!("an Append geometry")
        };
        assert_eq!(a.local_list(12), Some(2));
        assert_eq!(a.local_list(14), None);
        assert_eq!(a.local_list(9), None);
        assert!(StoreGeometry::try_from(&meta(kind(4, 10, 4096), 3 * 4096 + one - 1)).is_err());
        assert!(matches!(
            StoreGeometry::try_from(&meta(kind(0, 0, 4096), 4096)),
            Err(GeometryError::Lists(_))
        ));
        assert!(matches!(
            StoreGeometry::try_from(&meta(kind(2, 0, one - 1), 1 << 20)),
            Err(GeometryError::Lists(_))
        ));
        assert!(matches!(
            StoreGeometry::try_from(&meta(kind(2, u32::MAX, 4096), 1 << 20)),
            Err(GeometryError::Lists(_))
        ));
        let mut with_n = meta(kind(4, 10, 4096), 4 * 4096);
        with_n.redundancy = crate::meta::Redundancy::new(2);
        assert_eq!(
            StoreGeometry::try_from(&with_n),
            Err(GeometryError::AppendRedundancy)
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        let kw = StoreKind::KeyWrite {
            slots: 1000,
            slot_size: 16,
            hash: HashProfile::Independent,
        };
        assert!(matches!(
            StoreGeometry::try_from(&meta(kw, 1 << 20)),
            Err(GeometryError::Layout(_))
        ));
        let pc = StoreKind::Postcard {
            chunks: 1024,
            hops: 4,
            hash: HashProfile::Reference,
        };
        assert!(matches!(
            StoreGeometry::try_from(&meta(pc, 1 << 20)),
            Err(GeometryError::Hash(_))
        ));
    }
}
