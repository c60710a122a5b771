//! Finds DPDK with pkg-config, compiles the C shim and generates bindings for the few
//! functions and types dta uses.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_LINK").is_none() {
        return;
    }
    println!("cargo:rerun-if-changed=src/shim.h");
    println!("cargo:rerun-if-changed=src/shim.c");
    let lib = match pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(false)
        .probe("libdpdk")
    {
        Ok(l) => l,
        Err(e) => panic!(
            "DPDK (libdpdk-dev ≥ 22.11) not found by pkg-config: {e}\n\
             Install it with scripts/prepare-optional.sh, or build without the `dpdk` feature."
        ),
    };
    // Only the libraries the shim and bindings use; drivers (PMDs) are loaded by the EAL
    // from its plugin directory at run time.
    for p in &lib.link_paths {
        println!("cargo:rustc-link-search=native={}", p.display());
    }
    for l in [
        "rte_ethdev",
        "rte_mbuf",
        "rte_mempool",
        "rte_ring",
        "rte_eal",
        "rte_kvargs",
    ] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }

    // The include flags, `-include rte_config.h` and `-march` all matter to the headers.
    let out = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("pkg-config runs");
    let flags: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();

    let mut cc = cc::Build::new();
    cc.file("src/shim.c").opt_level(3).warnings(false);
    for f in &flags {
        cc.flag(f);
    }
    cc.compile("dta_dpdk_shim");

    let mut b = bindgen::Builder::default()
        .header("src/shim.h")
        .allowlist_function("dta_.*")
        .allowlist_function("rte_eal_init")
        .allowlist_function("rte_eal_cleanup")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_thread_register")
        .allowlist_function("rte_thread_unregister")
        .allowlist_function("rte_eth_dev_count_avail")
        .allowlist_function("rte_eth_dev_get_port_by_name")
        .allowlist_function("rte_eth_dev_info_get")
        .allowlist_function("rte_eth_dev_configure")
        .allowlist_function("rte_eth_rx_queue_setup")
        .allowlist_function("rte_eth_tx_queue_setup")
        .allowlist_function("rte_eth_dev_start")
        .allowlist_function("rte_eth_dev_stop")
        .allowlist_function("rte_eth_dev_close")
        .allowlist_function("rte_eth_dev_socket_id")
        .allowlist_function("rte_eth_macaddr_get")
        .allowlist_function("rte_eth_promiscuous_enable")
        .allowlist_function("rte_eth_stats_get")
        .allowlist_function("rte_eth_find_next_owned_by")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_free")
        .allowlist_type("rte_eth_conf")
        .allowlist_type("rte_eth_stats")
        .allowlist_type("rte_eth_dev_info")
        .allowlist_type("rte_ether_addr")
        .allowlist_var("RTE_ETH_NAME_MAX_LEN")
        .allowlist_var("RTE_MBUF_DEFAULT_BUF_SIZE")
        .allowlist_var("RTE_PKTMBUF_HEADROOM")
        .opaque_type("rte_mbuf")
        .opaque_type("rte_mempool")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for f in &flags {
        b = b.clang_arg(f);
    }
    let bindings = b.generate().expect("bindgen over the DPDK headers");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(out).expect("write bindings");
}
