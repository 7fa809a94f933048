//! Reading manifests, the one way `check`, `check --live` and `explain -f`
//! do it: files, folders (every `.yaml`, `.yml` and `.json`, sorted) or `-`
//! for standard input, parsed by [`mrguard_policy::commands::manifest`].

use std::path::{Path, PathBuf};

pub(crate) use mrguard_policy::commands::manifest::{
    parse_all, FileText, Manifest, ManifestError, MAX_DOCUMENTS,
};

/// `path` itself, or every `.yaml`, `.yml` and `.json` file under the folder
/// `path`, sorted; `-` stands for standard input.
pub(crate) fn files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    collect(path, &mut out)?;
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let read_err = |source| ManifestError::Read {
        path: path.display().to_string(),
        source,
    };
    if path == Path::new("-") || !std::fs::metadata(path).map_err(read_err)?.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            collect(&e, out)?;
        } else if e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
        {
            out.push(e);
        }
    }
    Ok(())
}

/// The text of a file, or of standard input for `-`.
pub(crate) fn read_text(path: &Path) -> Result<String, ManifestError> {
    let result = if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(path)
    };
    result.map_err(|source| ManifestError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The text of every file under `paths`, in order.
pub(crate) fn read_sources(paths: &[PathBuf]) -> Result<Vec<FileText>, ManifestError> {
    let mut all = Vec::new();
    for p in paths {
        for f in files(p)? {
            all.push(FileText {
                text: read_text(&f)?,
                file: f.display().to_string(),
            });
        }
    }
    Ok(all)
}

/// The files under `path`, each read when the iterator reaches it, so
/// that a large folder is never held in memory whole.
pub(crate) fn read_lazily(
    path: &Path,
) -> Result<impl Iterator<Item = Result<FileText, ManifestError>> + 'static, ManifestError> {
    Ok(files(path)?.into_iter().map(|f| {
        Ok(FileText {
            text: read_text(&f)?,
            file: f.display().to_string(),
        })
    }))
}

/// Every object of every file under `paths`, in order.
pub(crate) fn read(
    paths: &[PathBuf],
    max_documents: usize,
) -> Result<Vec<Manifest>, ManifestError> {
    parse_all(&read_sources(paths)?, max_documents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_give_their_manifest_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.yaml", "a.json", "c.txt", "sub/d.yml"] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let names: Vec<String> = files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.json", "b.yaml", "sub/d.yml"]);
        assert!(matches!(
            files(&dir.path().join("nope")),
            Err(ManifestError::Read { .. })
        ));
    }
}
