//! `GET /pull[/<agent>[/<block>]]`: the `[pull]` puller's newest snapshots, read through its
//! store API (`crate::zero`); nothing of the puller is changed from here.

use super::{ControlState, Reply};

/// `GET /pull[/<agent>[/<block>]]`: the newest snapshots the `[pull]` puller took (a block
/// name may contain `/`, e.g. `net/eth0`).
pub(super) fn pull_query(state: &ControlState, rest: &[&str]) -> Result<Reply, Reply> {
    let Some(p) = &state.pull else {
        return Err(Reply::error(
            404,
            "no [pull] section: this collector pulls from no agents".to_string(),
        ));
    };
    let (agent, block) = match rest {
        [] | [""] => (None, None),
        [a] => (Some(*a), None),
        [a, b @ ..] => (Some(*a), Some(b.join("/"))),
    };
    match p.store().query_json(agent, block.as_deref()) {
        Some(v) => Ok(Reply::json(200, v)),
        None => Err(Reply::error(
            404,
            format!(
                "no agent {:?}{}",
                agent.unwrap_or(""),
                block
                    .map(|b| format!(" with a block {b:?}"))
                    .unwrap_or_default()
            ),
        )),
    }
}
