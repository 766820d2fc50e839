use super::*;
use crate::status::FillStatus;

fn dir_origin(dir: &std::path::Path) -> Origin {
    let settings = OriginSettings {
        kind: OriginKind::Dir(dir.to_path_buf()),
        endpoint: None,
        region: "garage".into(),
        access_key_id: None,
        secret_access_key: None,
    };
    Origin::new(&settings).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_file_origin_gives_size_etag_and_exact_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("a.ts"), &data).unwrap();
    let o = dir_origin(dir.path());
    let rt = rt();
    let meta = rt.block_on(o.head("a.ts")).unwrap();
    assert_eq!(meta.size_bytes, data.len() as u64);
    assert!(!meta.etag.is_empty());
    let got = rt
        .block_on(o.get_range("a.ts", 1_048_576..2_097_152, &meta.etag))
        .unwrap();
    assert_eq!(&got[..], &data[1_048_576..2_097_152]);
    // The last, short range.
    let got = rt
        .block_on(o.get_range("a.ts", 2_097_152..3_000_000, &meta.etag))
        .unwrap();
    assert_eq!(&got[..], &data[2_097_152..]);
}

#[test]
fn missing_changed_and_bad_keys_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.ts"), vec![1u8; 10_000]).unwrap();
    let o = dir_origin(dir.path());
    let rt = rt();
    let e = rt.block_on(o.head("nope.ts")).unwrap_err();
    assert_eq!(e.class(), ErrorClass::NotFound, "{e}");
    assert_eq!(e.status(), FillStatus::NotFound);
    let meta = rt.block_on(o.head("a.ts")).unwrap();
    // Another version (another length: another ETag).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(dir.path().join("a.ts"), vec![2u8; 12_000]).unwrap();
    let e = rt
        .block_on(o.get_range("a.ts", 0..1000, &meta.etag))
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Changed, "{e}");
    assert_eq!(e.status(), FillStatus::Conflict);
    let e = rt.block_on(o.head("../etc/passwd")).unwrap_err();
    assert_eq!(e.class(), ErrorClass::NotFound, "{e}");
}

#[test]
fn an_unreachable_s3_origin_is_502_and_no_secret_is_shown() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let secret = "s3cr3t-Zq9-do-not-print";
    let settings = OriginSettings {
        kind: OriginKind::S3 {
            bucket: "films".into(),
        },
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: "garage".into(),
        access_key_id: Some("GKtestkey".into()),
        secret_access_key: Some(secret.into()),
    };
    assert!(!format!("{settings:?}").contains(secret));
    let o = Origin::new(&settings).unwrap();
    assert!(!format!("{o:?}").contains(secret));
    let e = rt().block_on(o.head("a.ts")).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Unreachable, "{e}");
    assert_eq!(e.status(), FillStatus::BadGateway);
    assert!(!e.to_string().contains(secret), "{e}");
}

#[test]
fn secrets_are_redacted_and_origins_parsed() {
    let r = error::Redact::new(vec!["abc123".into(), String::new()]);
    assert_eq!(r.text("key abc123 and abc123"), "key *** and ***");
    assert_eq!(
        OriginKind::parse("s3://films").unwrap(),
        OriginKind::S3 {
            bucket: "films".into()
        }
    );
    assert_eq!(
        OriginKind::parse("file:///srv/films").unwrap(),
        OriginKind::Dir("/srv/films".into())
    );
    for bad in ["s3://", "s3://Films", "file://rel", "http://x", "films"] {
        assert!(OriginKind::parse(bad).is_err(), "{bad}");
    }
}
