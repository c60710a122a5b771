//! Configuration files: `CollectorConfig::from_toml` and `TranslatorConfig::from_toml` (which
//! validate) never panic on any UTF-8 text, and a configuration that loads validates again.
#![no_main]

use dta_collector::config::CollectorConfig;
use dta_translator::config::TranslatorConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = CollectorConfig::from_toml(s) {
        c.validate().expect("a loaded collector config is valid");
        for st in &c.stores {
            let _ = dta_collector::store::layout_of(st);
        }
    }
    if let Ok(t) = TranslatorConfig::from_toml(s) {
        t.validate().expect("a loaded translator config is valid");
    }
});
