//! `isnode volume rekey`: every content key rewrapped under a new node key in one catalog
//! transaction; the titles' bytes are not touched (docs/format.md, "Protection tables").
//!
//! Without `--new-key-file` a new key is written to `CURRENT.new` (`O_EXCL`, 0600), the
//! rows are rewrapped, then `CURRENT.new` is renamed over `CURRENT`: a server reads the
//! node key at each key request and uses the new one at once. A run cut short is resumed
//! by running it again: `CURRENT.new` is read back, and rows already wrapped under it (by
//! their node key id) are left as they are.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_keys::node_key::NodeKey;
use isnode_store::protection::WrappedKey;
use isnode_store::Volume;

use crate::cli::RekeyArgs;

/// `volume rekey`.
pub(super) fn run(root: &Path, args: &RekeyArgs) -> anyhow::Result<ExitCode> {
    let mut vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
    let current_path = super::protect::node_key_path(root, args.node_key_file.as_deref());
    let staged = args
        .new_key_file
        .is_none()
        .then(|| staged_path(&current_path));
    let new = match (&args.new_key_file, &staged) {
        (Some(p), _) => NodeKey::load(p)?,
        (None, Some(p)) => NodeKey::load_or_create(p)?.0,
        (None, None) => unreachable!("staged when no new file is named"),
    };
    let rows = vol.catalog().wrapped_keys()?;
    let pending: Vec<&WrappedKey> = rows.iter().filter(|r| r.node_key_id != new.id()).collect();
    let mut rewrapped = Vec::with_capacity(pending.len());
    if !pending.is_empty() {
        let current = NodeKey::load(&current_path)?;
        if current.id() == new.id() {
            bail!("the new node key is the current one ({})", current.id_hex());
        }
        for r in pending {
            if r.node_key_id != current.id() {
                bail!(
                    "object TOI {} is wrapped under node key {}, neither the current ({}) nor \
                     the new one ({}): nothing was changed",
                    r.toi,
                    isnode_keys::hex(&r.node_key_id),
                    current.id_hex(),
                    new.id_hex()
                );
            }
            let key = current.unwrap(&r.wrapped_key)?;
            rewrapped.push(WrappedKey {
                toi: r.toi,
                wrapped_key: new.wrap(&key),
                node_key_id: new.id(),
            });
        }
        vol.rewrap_keys(&rewrapped)?;
    }
    if let Some(staged) = staged {
        std::fs::rename(&staged, &current_path).with_context(|| {
            format!(
                "putting {} in place of {}",
                staged.display(),
                current_path.display()
            )
        })?;
        sync_parent(&current_path)?;
    }
    println!(
        "rewrapped {} of {} content keys under node key {}{}",
        rewrapped.len(),
        rows.len(),
        new.id_hex(),
        match &args.new_key_file {
            Some(p) => format!(
                ": the server's node_key_file must name {} now (read at each key request)",
                p.display()
            ),
            None => format!(", now in {}", current_path.display()),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Where a new key is made before it replaces the current file.
fn staged_path(current: &Path) -> PathBuf {
    let mut s = current.as_os_str().to_os_string();
    s.push(".new");
    PathBuf::from(s)
}

fn sync_parent(path: &Path) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}
