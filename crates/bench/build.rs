//! Detects ISA-L (Debian: `libisal-dev`) so the codec comparison can include it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_isal)");
    println!("cargo::rerun-if-env-changed=ISNODE_BENCH_NO_ISAL");
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ];
    for dir in dirs.iter().filter(|d| std::path::Path::new(d).is_dir()) {
        println!("cargo::rerun-if-changed={dir}");
    }
    if std::env::var_os("ISNODE_BENCH_NO_ISAL").is_some() {
        return;
    }
    if let Some(dir) = dirs
        .iter()
        .find(|d| std::path::Path::new(d).join("libisal.so").exists())
    {
        println!("cargo::rustc-link-search=native={dir}");
        println!("cargo::rustc-link-lib=dylib=isal");
        println!("cargo::rustc-cfg=has_isal");
    }
}
