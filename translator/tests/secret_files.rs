//! Issue 28, part 6: `dta-translator --control-only --emit-connections FILE` writes every
//! store's address, R_Key, QPNs and PSNs (all a forged RDMA WRITE needs): the file is created
//! readable by its owner only (0600), as the collector's metadata file is, also when it exists
//! already with a wider mode.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use dta_proto::meta::{CollectorMeta, QpMeta, StoreKind, StoreMeta};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn emitted_connections_are_readable_by_their_owner_only() {
    let dir = std::env::temp_dir().join(format!("dta-emit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Static set-up: the metadata a collector published, with one prepared QP.
    let meta = CollectorMeta {
        roce: "127.0.0.1:4791".parse().unwrap(),
        mac: "02:00:00:00:00:51".into(),
        verify_icrc: true,
        stores: vec![StoreMeta {
            name: "paths".into(),
            addr: 0x7f00_0000_1000,
            len: 1 << 20,
            rkey: 0x1234_5601,
            qps: vec![QpMeta {
                qpn: 0x11,
                psn: 0x22,
                peer_qpn: 0x33,
            }],
            redundancy: None,
            kind: StoreKind::KeyWrite {
                slots: 1 << 16,
                slot_size: 8,
                hash: dta_proto::hash::HashProfile::Independent,
            },
        }],
    };
    let meta_file = dir.join("collector.json");
    std::fs::write(&meta_file, serde_json::to_string(&meta).unwrap()).unwrap();
    let cfg = dir.join("translator.toml");
    std::fs::write(
        &cfg,
        format!(
            "[translator]\nlisten = \"127.0.0.1:0\"\nroce = \"127.0.0.1:0\"\n\
             [[collector]]\nname = \"c\"\nmetadata = {meta_file:?}\n"
        ),
    )
    .unwrap();
    let out = dir.join("connections.json");
    // Once on a new path, once over a file everyone may read.
    for pre in [None, Some(0o644)] {
        if let Some(m) = pre {
            std::fs::write(&out, "stale").unwrap();
            std::fs::set_permissions(&out, std::fs::Permissions::from_mode(m)).unwrap();
        }
        let r = Command::new(env!("CARGO_BIN_EXE_dta-translator"))
            .arg("-c")
            .arg(&cfg)
            .arg("--control-only")
            .arg("--emit-connections")
            .arg(&out)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let js: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(js[0]["rkey"], 0x1234_5601u32, "{js}");
        assert_eq!(
            mode(&out),
            0o600,
            "the connections file is mode {:03o}",
            mode(&out)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
