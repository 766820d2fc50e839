//! Progress bars on stderr (drawn only when stderr is a terminal).

use indicatif::{ProgressBar, ProgressStyle};

/// A byte progress bar of `total` bytes.
pub(crate) fn bytes(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
