//! Fuzz the FDT instance XML parser: it must never panic, and what it accepts must survive
//! a `to_xml` / `from_xml` round trip when it is sendable.
#![no_main]

use isnode_wire::fdt::FdtInstance;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(fdt) = FdtInstance::from_xml(data) else {
        return;
    };
    if fdt.validate().is_ok() {
        let back = FdtInstance::from_xml(fdt.to_xml().as_bytes()).expect("own XML parses");
        assert_eq!(back, fdt);
    }
});
