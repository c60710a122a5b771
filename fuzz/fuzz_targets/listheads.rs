//! List-head messages (sent after a sequenced Append store's metadata record): parse never
//! panics; a message that parses re-emits to the same bytes; an assembly never takes a list
//! twice and completes only when every list is covered.
#![no_main]

use dta_proto::wire::listheads::{emit, message_len, HeadsAssembly, ListHeads};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The input may hold several messages, each prefixed by a one-byte length.
    let mut asm: Option<HeadsAssembly> = None;
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = (n as usize * 4).min(tail.len());
        let (msg, tail) = tail.split_at(n);
        rest = tail;
        let Ok(m) = ListHeads::new_checked(msg) else {
            continue;
        };
        assert_eq!(msg.len(), message_len(m.count()));
        let next: Vec<u64> = m.iter().map(|(_, s)| s).collect();
        let mut again = vec![0u8; msg.len()];
        assert_eq!(
            emit(m.first(), m.lists(), &next, &mut again),
            Some(msg.len())
        );
        assert_eq!(again, msg);
        if m.lists() > 1 << 16 {
            continue;
        }
        let a = asm.get_or_insert_with(|| HeadsAssembly::new(m.lists()));
        let before = a.heads().iter().filter(|&&s| s != 0).count();
        if a.add(&m).is_ok() {
            let after = a.heads().iter().filter(|&&s| s != 0).count();
            assert_eq!(after, before + m.count());
            assert_eq!(a.complete(), after == m.lists() as usize);
        }
    }
});
