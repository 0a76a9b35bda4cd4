//! The enforcer's config file: any text is parsed and validated into a config or an error
//! that names the file, never a panic. Checked as for another machine (`Machine::Elsewhere`),
//! so that the run does not depend on this machine's cgroups and processes.
#![no_main]

use std::path::Path;

use enforcer::config::{Config, Machine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    match Config::parse_for(path, text, Machine::Elsewhere { cpus: 16 }) {
        Ok(config) => {
            let _ = config.settings();
        }
        Err(err) => assert!(err.to_string().contains("fuzz.toml"), "{err}"),
    }
});
