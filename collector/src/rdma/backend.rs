//! The collector's use of dta-rnic's real-RNIC backend ([`dta_rnic::rdma`]): its stores as
//! [`StoreSpec`]s, their R_Keys and the published description. The event thread, devices and
//! connections are dta-rnic's.

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use dta_proto::layout::AppendFormat;
use dta_proto::meta::CollectorMeta;
use dta_proto::wire::metarec::MetaRecord;
use dta_rnic::rdma::StoreSpec;

use super::Started;
use crate::config::CollectorConfig;
use crate::service::Published;

/// Builds the stores of `config`, one [`StoreSpec`] each (a real RNIC always checks the ICRC;
/// a sequenced Append store announces its list heads), and starts dta-rnic's event thread.
pub(super) fn start(
    config: &CollectorConfig,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
) -> Result<Started, String> {
    if !config.static_peers.is_empty() {
        log::warn!(
            "rdma: [[static_peer]] entries are ignored: a real RNIC's QPs are set up with RDMA_CM"
        );
    }
    let mut stores = crate::store::build_stores_with(config, |_| None)?;
    let ip = *config.collector.roce.ip();
    let specs: Vec<StoreSpec> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // A real RNIC always checks the ICRC.
            let mut record = MetaRecord::from_store_meta(&s.meta, true);
            let heads = s
                .append()
                .filter(|a| a.layout.format() == AppendFormat::Sequenced);
            record.list_heads = heads.is_some();
            StoreSpec {
                name: s.meta.name.clone(),
                port: s.port,
                region: s.region.clone(),
                record: Some(record),
                heads,
                allow: config.cm_allowlist(i),
            }
        })
        .collect();
    let (thread, rkeys) = dta_rnic::rdma::spawn(ip, specs, published, stop)?;
    for (s, k) in stores.iter_mut().zip(rkeys) {
        if let Some(k) = k {
            s.meta.rkey = k;
        }
    }
    let roce = SocketAddrV4::new(ip, dta_proto::consts::ROCEV2_PORT);
    let meta = CollectorMeta {
        roce,
        mac: config.collector.mac.clone(),
        verify_icrc: true,
        stores: stores.iter().map(|s| s.meta.clone()).collect(),
    };
    Ok(Started {
        stores,
        meta,
        roce,
        thread,
    })
}
