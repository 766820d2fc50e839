//! A benchmark's server's counters: its `/metrics`, in Prometheus text.

use anyhow::Context;

/// The text of `GET /metrics` of the server at `base`.
pub(crate) fn fetch(agent: &ureq::Agent, base: &str) -> anyhow::Result<String> {
    let mut resp = agent
        .get(format!("{base}/metrics"))
        .call()
        .context("GET /metrics")?;
    Ok(resp.body_mut().read_to_string()?)
}

/// The sum of the samples of metric `name` (every label set) in Prometheus text.
pub(crate) fn metric(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let value = match rest.strip_prefix('{') {
            Some(labelled) => labelled.split_once('}').map(|(_, v)| v),
            None => rest.starts_with(' ').then_some(rest),
        };
        if let Some(v) = value.and_then(|v| v.trim().parse::<u64>().ok()) {
            found = Some(found.unwrap_or(0u64).saturating_add(v));
        }
    }
    found
}
