//! The config loader: never panics on any text, and every problem it
//! reports names a line inside the text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::{validate, ConfigError, Source};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match validate(text, Source::Embedded, Path::new("/fuzz"), 1) {
        Ok(_) => {}
        Err(ConfigError::Invalid { problems, .. }) => {
            let lines = text.lines().count().max(1) + 1;
            for p in problems {
                if let Some(l) = p.line {
                    assert!(l >= 1 && l <= lines, "line {l} of {lines}");
                }
            }
        }
        Err(ConfigError::Read { .. }) => unreachable!("validate reads no file"),
    }
});
