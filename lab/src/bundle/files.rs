//! Files of a bundle: caches and trees copied, the runner made executable, sizes, `.tar.gz`
//! packed and unpacked.

use super::*;

/// Copies a CubeCL cache root `from` into `to` ([`copy_tree`]); with `autotune_only`, only the
/// files under an `autotune` folder (the tunings, not the compiled kernels).
pub(super) fn copy_cache(from: &Path, to: &Path, autotune_only: bool) -> Result<usize> {
    if !autotune_only {
        return copy_tree(from, to);
    }
    let mut n = 0;
    for entry in std::fs::read_dir(from).doing(|| format!("listing {}", from.display()))? {
        let entry = entry.doing(|| format!("listing {}", from.display()))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_name() == "autotune" && src.is_dir() {
            n += copy_tree(&src, &dst)?;
        } else if src.is_dir() {
            n += copy_cache(&src, &dst, true)?;
        }
    }
    Ok(n)
}

/// Copies the files under `from` into `to` (folders created, files overwritten); returns how
/// many files it copied.
pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<usize> {
    std::fs::create_dir_all(to).doing(|| format!("creating {}", to.display()))?;
    let mut n = 0;
    for entry in std::fs::read_dir(from).doing(|| format!("listing {}", from.display()))? {
        let entry = entry.doing(|| format!("listing {}", from.display()))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            n += copy_tree(&src, &dst)?;
        } else if src.is_file() {
            std::fs::copy(&src, &dst)
                .doing(|| format!("copying {} to {}", src.display(), dst.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// `<out>.tar.gz` beside the folder `out`.
pub fn archive_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle".into());
    out.with_file_name(format!("{name}.tar.gz"))
}

/// Copies the runner to `to`, stripped when a `strip` program exists; returns whether it was.
pub(super) fn copy_runner(from: &Path, to: &Path) -> Result<bool> {
    let _ = std::fs::remove_file(to);
    let stripped = std::process::Command::new("strip")
        .arg("-o")
        .arg(to)
        .arg(from)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !stripped {
        std::fs::copy(from, to)
            .doing(|| format!("copying the runner {} to {}", from.display(), to.display()))?;
    }
    set_executable(to)?;
    Ok(stripped)
}

/// Compresses the runner `bin` into `<bin>.gz` (gzip, best compression) and removes `bin`: a
/// GPU bundle's runner travels so, a third of its size (39.9 -> 12.6 MB for the slim CUDA
/// runner of 2026-12-04), and `run.sh` unpacks it before the first job. The archive is written
/// beside and renamed into place; returns its path.
pub(super) fn compress_runner(bin: &Path) -> Result<PathBuf> {
    let gz = bin.with_extension("gz");
    let tmp = bin.with_extension("gz.partial");
    let mut from = std::fs::File::open(bin).doing(|| format!("opening {}", bin.display()))?;
    let to = std::fs::File::create(&tmp).doing(|| format!("creating {}", tmp.display()))?;
    let mut enc = flate2::write::GzEncoder::new(to, flate2::Compression::best());
    std::io::copy(&mut from, &mut enc)
        .and_then(|_| enc.finish().map(|_| ()))
        .doing(|| format!("compressing {} into {}", bin.display(), tmp.display()))?;
    std::fs::rename(&tmp, &gz).doing(|| format!("writing {}", gz.display()))?;
    std::fs::remove_file(bin).doing(|| format!("removing {}", bin.display()))?;
    Ok(gz)
}

pub(super) fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .doing(|| format!("making {} executable", path.display()))
}

/// Total bytes of the regular files under `dir`.
pub(super) fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).doing(|| format!("listing {}", dir.display()))? {
        let entry = entry.doing(|| format!("listing {}", dir.display()))?;
        let meta = entry
            .metadata()
            .doing(|| format!("reading {}", entry.path().display()))?;
        if meta.is_dir() {
            total += dir_size(&entry.path())?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

/// Packs the folder `dir` into the gzip-compressed tar `file`, under the folder's own name
/// (so unpacking it recreates the folder). The archive is written beside and renamed into place.
pub(super) fn pack_dir(dir: &Path, file: &Path) -> Result<()> {
    let tmp = file.with_extension("gz.partial");
    let f = std::fs::File::create(&tmp).doing(|| format!("creating {}", tmp.display()))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    let name = dir
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| "bundle".into());
    tar.append_dir_all(&name, dir)
        .doing(|| format!("packing {}", dir.display()))?;
    tar.into_inner()
        .and_then(|gz| gz.finish())
        .doing(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).doing(|| format!("writing {}", file.display()))?;
    Ok(())
}

/// Unpacks the gzip-compressed tar `file` into `into` (entries that would leave `into` are
/// refused by the `tar` crate's `unpack_in`).
pub(super) fn unpack_tgz(file: &Path, into: &Path) -> Result<()> {
    let f = std::fs::File::open(file).doing(|| format!("opening {}", file.display()))?;
    let mut magic = [0u8; 2];
    {
        use std::io::Read;
        let mut probe =
            std::fs::File::open(file).doing(|| format!("opening {}", file.display()))?;
        probe
            .read_exact(&mut magic)
            .doing(|| format!("reading {}", file.display()))?;
    }
    if magic != [0x1f, 0x8b] {
        refuse!(
            "{} is not a gzip-compressed tar archive (expected a .tar.gz/.tgz, e.g. {RESULTS_ARCHIVE})",
            file.display()
        );
    }
    std::fs::create_dir_all(into).doing(|| format!("creating {}", into.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(f));
    for entry in archive
        .entries()
        .doing(|| format!("reading {}", file.display()))?
    {
        let mut entry = entry.doing(|| format!("reading {}", file.display()))?;
        entry
            .unpack_in(into)
            .doing(|| format!("unpacking {} into {}", file.display(), into.display()))?;
    }
    Ok(())
}
