//! The Garage harness works: a 3-node cluster on loopback takes `isnode publish`'s uploads
//! (one PUT, and multipart), serves them back whole and by range (object_store), and still
//! does with one node killed (`kill -9`).

mod serve_support;

use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as StorePath;
use object_store::ObjectStore;
use serve_support::command;
use serve_support::garage::{Garage, BUCKET, REGION};

/// `len` bytes of a seeded SplitMix64 stream.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

fn store(g: &Garage, node: usize) -> object_store::aws::AmazonS3 {
    AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_region(REGION)
        .with_endpoint(g.endpoint(node))
        .with_allow_http(true)
        .with_access_key_id(&g.key_id)
        .with_secret_access_key(&g.secret)
        .build()
        .expect("an S3 client")
}

fn get(g: &Garage, node: usize, key: &str, range: Option<std::ops::Range<u64>>) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = store(g, node);
        let p = StorePath::from(key);
        let fut = async {
            match range {
                Some(r) => s.get_range(&p, r).await.map(|b| b.to_vec()),
                None => match s.get(&p).await {
                    Ok(r) => r.bytes().await.map(|b| b.to_vec()),
                    Err(e) => Err(e),
                },
            }
        };
        tokio::time::timeout(Duration::from_secs(30), fut)
            .await
            .expect("a GET within 30 s")
            .unwrap_or_else(|e| panic!("GET {key} from node {node}: {e}\n{}", g.logs()))
    })
}

#[test]
fn garage_takes_publishes_and_serves_ranges_with_a_node_down() {
    let mut g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let small = random_bytes(1, 300_000);
    let large = random_bytes(2, 13 << 20);
    let small_path = dir.path().join("small.ts");
    let large_path = dir.path().join("large.ts");
    std::fs::write(&small_path, &small).unwrap();
    std::fs::write(&large_path, &large).unwrap();
    g.publish(0, &small_path, "small.ts", &[]);
    // 13 MiB in 5 MiB parts: a multipart upload of three parts.
    let said = g.publish(
        1,
        &large_path,
        "dir/large.ts",
        &["--part-size-bytes", "5242880"],
    );
    assert!(said.contains("s3://titles/dir/large.ts"), "{said}");
    assert_eq!(get(&g, 2, "small.ts", None), small);
    assert_eq!(get(&g, 0, "dir/large.ts", None), large);
    let r = (5u64 << 20) - 7..(6u64 << 20) + 11;
    let want = &large[r.start as usize..r.end as usize];
    assert_eq!(get(&g, 2, "dir/large.ts", Some(r.clone())), want);
    g.kill(0);
    assert_eq!(get(&g, 1, "dir/large.ts", Some(r)), want, "one node down");
    assert_eq!(get(&g, 2, "small.ts", None), small, "one node down");
}

#[test]
fn publish_refuses_wrong_credentials_without_printing_the_secret() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.ts");
    std::fs::write(&f, random_bytes(3, 1000)).unwrap();
    let wrong = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let out = command()
        .arg("publish")
        .arg(&f)
        .arg("--origin")
        .arg(format!("s3://{BUCKET}/t.ts"))
        .envs(g.env(0))
        .env("AWS_SECRET_ACCESS_KEY", wrong)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "published with a wrong secret");
    assert!(text.contains("uploading s3://titles/t.ts"), "{text}");
    assert!(!text.contains(wrong), "the secret was printed: {text}");
}
