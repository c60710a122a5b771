//! `dta`: the DTA workbench. `dta demo` runs the whole system on loopback.

use clap::{Parser, Subcommand};

use dta_bench::demo::{self, DemoOptions};

/// DTA (Direct Telemetry Access) workbench: run the whole system end to end on loopback,
/// generate telemetry workloads, and measure.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run collector (software RNIC) + translator + report generator on loopback and check
    /// every answer against what was sent.
    Demo {
        /// Key-Write INT path reports (one per flow, 20-byte paths, keyed by 5-tuple).
        #[arg(long, default_value_t = 1_000_000)]
        keywrite: u64,
        /// Append loss events (18 bytes each).
        #[arg(long, default_value_t = 1_000_000)]
        append: u64,
        /// Append lists.
        #[arg(long, default_value_t = 8)]
        lists: u32,
        /// Ring capacity per list, in entries.
        #[arg(long, default_value_t = 65536)]
        capacity: u32,
        /// Key-Write slots, as a power of two.
        #[arg(long, default_value_t = 23)]
        slots_log2: u32,
        /// Key-Write redundancy N.
        #[arg(long, default_value_t = 2)]
        redundancy: u8,
        /// Append batch size (1..=16).
        #[arg(long, default_value_t = 16)]
        batch: u32,
        /// Reports per second (0 = as fast as the translator takes them).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Workload seed.
        #[arg(long, default_value_t = 2023)]
        seed: u64,
    },
    /// Print the P4 include file of constants generated from `dta_proto`
    /// (`p4/include/dta_constants.p4`).
    P4Constants,
    /// Regenerate the shared conformance corpus (reports, expected RoCEv2 frames, expected
    /// collector memory) from the independent model.
    Corpus {
        /// Output folder.
        #[arg(long, default_value = "tests/corpus")]
        out: std::path::PathBuf,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match Cli::parse().cmd {
        Cmd::P4Constants => print!("{}", dta_bench::p4gen::render()),
        Cmd::Corpus { out } => match dta_bench::corpus::write_corpus(&out) {
            Ok(n) => println!("wrote {n} cases to {}", out.display()),
            Err(e) => {
                eprintln!("dta corpus: {e}");
                std::process::exit(1);
            }
        },
        Cmd::Demo {
            keywrite,
            append,
            lists,
            capacity,
            slots_log2,
            redundancy,
            batch,
            rate,
            seed,
        } => {
            let opts = DemoOptions {
                keywrite,
                append,
                lists,
                capacity,
                slots_log2,
                redundancy,
                batch,
                rate,
                seed,
                progress: true,
            };
            match demo::run(&opts) {
                Ok(r) => {
                    demo::print(&opts, &r);
                    if r.kw_wrong > 0 || r.append_misordered > 0 {
                        std::process::exit(1);
                    }
                }
                Err(e) => {
                    eprintln!("dta demo: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
