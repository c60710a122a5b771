//! AF_XDP on the veth pair (the `af_xdp` feature, root): flow-controlled and pre-filled.

use dta_translator::config::BackendKind;

use super::prefilled::{bare_prefilled, send_from_a};
use super::*;
use crate::gen::Scenario;
use crate::trace::Trace;
use dta_io::netns::{enter_netns, Netns};

/// AF_XDP on the veth pair (native mode, copy). Needs the `af_xdp` feature and root.
#[cfg(feature = "af_xdp")]
pub fn compare_af_xdp(
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
) -> Result<Comparison, String> {
    use dta_io::af_xdp::{AfXdpBackend, AfXdpConfig};
    let ifb = net.if_b.clone();
    compare_netns(
        "af_xdp",
        net,
        sc,
        trace,
        o,
        move || {
            AfXdpBackend::open(AfXdpConfig::new(
                &ifb,
                &[dta_proto::consts::DTA_PORT, dta_proto::consts::ROCEV2_PORT],
            ))
            .map_err(|e| format!("AF_XDP on {ifb}: {e}"))
        },
        |cfg| {
            cfg.translator.backend = BackendKind::AfXdp;
            cfg.af_xdp.interface = net.if_b.clone();
        },
    )
}

/// UMEM frames for the pre-filled AF_XDP runs: half of them receive, so the RX ring holds
/// 32,768 frames.
#[cfg(feature = "af_xdp")]
pub const PREFILL_XDP_FRAMES: u32 = 65536;

/// AF_XDP on the veth pair, pre-filled (both sides with [`PREFILL_XDP_FRAMES`] UMEM frames).
#[cfg(feature = "af_xdp")]
pub fn compare_af_xdp_prefilled(
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
) -> Result<Comparison, String> {
    use dta_io::af_xdp::{AfXdpBackend, AfXdpConfig};
    let p = Prefill {
        packets: p.packets.min(PREFILL_XDP_FRAMES as u64 / 2 - 1024),
        ..p
    };
    let (ifb, ns_b) = (net.if_b.clone(), net.ns_b.clone());
    let send = |n: u64, _warm: bool| send_from_a(net, trace, n);
    let bare = bare_prefilled(
        "af_xdp rx",
        freezer,
        p,
        move || {
            enter_netns(&ns_b)?;
            let mut c = AfXdpConfig::new(
                &ifb,
                &[dta_proto::consts::DTA_PORT, dta_proto::consts::ROCEV2_PORT],
            );
            c.frame_count = PREFILL_XDP_FRAMES;
            c.ring_size = PREFILL_XDP_FRAMES / 2;
            AfXdpBackend::open(c).map_err(|e| format!("AF_XDP on {ifb}: {e}"))
        },
        &send,
    )?;
    translator_netns_prefilled(
        "af_xdp",
        net,
        sc,
        trace,
        p,
        freezer,
        |cfg| {
            cfg.translator.backend = BackendKind::AfXdp;
            cfg.af_xdp.interface = net.if_b.clone();
            cfg.af_xdp.frame_count = PREFILL_XDP_FRAMES;
        },
        bare,
    )
}
