//! Every JSON example of `docs/protocol.md` parses into the type its fence names
//! (```` ```json TypeName ````) and serializes back to the same JSON (so an example cannot
//! carry a misspelt, extra or missing field), and every body type has an example.

use std::collections::BTreeMap;

use isnode_proto::auth::ValidateSession;
use isnode_proto::broadcast::{
    BroadcastInfo, BroadcastList, CreateBroadcast, SessionRedirect, TitleBroadcastInfo,
};
use isnode_proto::status::StatusBody;
use isnode_proto::{
    ControlAnswer, CreateSession, ErrorBody, KeepaliveBody, MediaIndex, ObjectInfo, ObjectList,
    SessionControl, SessionInfo, SessionStatus,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// One example: its type name, first line number, text.
struct Example {
    ty: String,
    line: usize,
    text: String,
}

/// The ```` ```json ```` blocks of a Markdown text (other fenced blocks are skipped).
fn examples(md: &str) -> Result<Vec<Example>, String> {
    let mut out = Vec::new();
    let mut open: Option<Example> = None;
    let mut in_other_block = false;
    for (i, line) in md.lines().enumerate() {
        let line_no = i + 1;
        let fence = line.trim_start().strip_prefix("```");
        if in_other_block {
            in_other_block = fence.is_none();
            continue;
        }
        match (open.as_mut(), fence) {
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(ex), None) => {
                ex.text.push_str(line);
                ex.text.push('\n');
            }
            (None, Some(info)) => {
                let mut words = info.split_whitespace();
                if words.next() != Some("json") {
                    in_other_block = true;
                    continue;
                }
                let ty = words
                    .next()
                    .ok_or_else(|| format!("line {line_no}: a json example names no type"))?;
                open = Some(Example {
                    ty: ty.to_string(),
                    line: line_no,
                    text: String::new(),
                });
            }
            (None, None) => {}
        }
    }
    match open {
        Some(ex) => Err(format!("line {}: unclosed example", ex.line)),
        None => Ok(out),
    }
}

/// Parses `text` as `T` and checks that it serializes back to the same JSON.
fn round_trip<T: DeserializeOwned + Serialize>(text: &str) -> Result<(), String> {
    let typed: T = serde_json::from_str(text).map_err(|e| format!("does not parse: {e}"))?;
    let raw: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("does not serialize: {e}"))?;
    if back != raw {
        return Err(format!(
            "does not serialize back unchanged:\n  doc:  {raw}\n  code: {back}"
        ));
    }
    Ok(())
}

type Check = fn(&str) -> Result<(), String>;

/// The body types of the API. (`FecInfo`, `Limit` and `SessionState` occur inside them.)
fn checks() -> BTreeMap<&'static str, Check> {
    BTreeMap::from([
        ("ObjectInfo", round_trip::<ObjectInfo> as Check),
        ("ObjectList", round_trip::<ObjectList>),
        ("CreateSession", round_trip::<CreateSession>),
        ("SessionInfo", round_trip::<SessionInfo>),
        ("SessionStatus", round_trip::<SessionStatus>),
        ("ErrorBody", round_trip::<ErrorBody>),
        ("SessionControl", round_trip::<SessionControl>),
        ("ControlAnswer", round_trip::<ControlAnswer>),
        ("MediaIndex", round_trip::<MediaIndex>),
        ("KeepaliveBody", round_trip::<KeepaliveBody>),
        ("CreateBroadcast", round_trip::<CreateBroadcast>),
        ("BroadcastInfo", round_trip::<BroadcastInfo>),
        ("BroadcastList", round_trip::<BroadcastList>),
        ("SessionRedirect", round_trip::<SessionRedirect>),
        ("TitleBroadcastInfo", round_trip::<TitleBroadcastInfo>),
        ("ValidateSession", round_trip::<ValidateSession>),
        ("StatusBody", round_trip::<StatusBody>),
    ])
}

/// Checks a document; returns every problem found.
fn check_doc(md: &str) -> Vec<String> {
    let examples = match examples(md) {
        Ok(e) => e,
        Err(e) => return vec![e],
    };
    let checks = checks();
    let mut problems = Vec::new();
    for ex in &examples {
        match checks.get(ex.ty.as_str()) {
            None => problems.push(format!("line {}: unknown type {}", ex.line, ex.ty)),
            Some(check) => {
                if let Err(e) = check(&ex.text) {
                    problems.push(format!("line {} ({}): {e}", ex.line, ex.ty));
                }
            }
        }
    }
    for ty in checks.keys() {
        if !examples.iter().any(|e| e.ty == *ty) {
            problems.push(format!("{ty} has no example"));
        }
    }
    problems
}

#[test]
fn protocol_md_examples_parse_into_their_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");
    let md = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let problems = check_doc(&md);
    assert!(
        problems.is_empty(),
        "docs/protocol.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_finds_bad_examples() {
    let good = "```json ErrorBody\n{\"error\": \"x\"}\n```\n";
    let bad_field = "```json ErrorBody\n{\"error\": \"x\", \"limitt\": 1}\n```\n";
    let bad_type = "```json Nope\n{}\n```\n";
    let untyped = "```json\n{}\n```\n";
    let missing = check_doc(good);
    assert!(
        missing.iter().all(|p| p.ends_with("has no example"))
            && missing.len() == checks().len() - 1,
        "{missing:?}"
    );
    assert!(check_doc(bad_field).iter().any(|p| p.contains("unchanged")));
    assert!(check_doc(bad_type)
        .iter()
        .any(|p| p.contains("unknown type")));
    assert!(check_doc(untyped)
        .iter()
        .any(|p| p.contains("names no type")));
    let other_lang = "```text\n{\n```\n";
    assert!(check_doc(other_lang)
        .iter()
        .all(|p| p.ends_with("has no example")));
}
