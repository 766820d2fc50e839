//! Fuzz the configuration file parser (`isnode serve --config`, `isnode config check`,
//! SIGHUP): it must never panic, and a configuration it accepts validates and survives a
//! round trip through TOML unchanged.
#![no_main]

use isnode_serve_config::ServeConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = ServeConfig::from_toml(text) {
        assert!(config.validate().is_ok());
        let again = ServeConfig::from_toml(&config.to_toml()).expect("its own TOML parses");
        assert_eq!(again, config);
    }
});
