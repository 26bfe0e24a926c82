//! The parts studies play beyond their own report, read from the `[study]` headers of the
//! experiment files (one place for them): the GPU suite and its order (`gpu_suite`), the
//! studies PyTorch eager runs as twins (`pytorch_twin`) and the one whose control the
//! kernel-attribution benchmark times (`kernel_attribution`), and the one whose glance opens the
//! README's results block (`readme_headline`), and the GPU jobs of in-process studies
//! (`gpu_job`).

use super::file::read_header;
use super::{GpuJob, Study, StudyHeader, StudyKind};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The roles of the studies of one experiments folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StudyRoles {
    /// The GPU suite in the order it runs (`study.gpu_suite` ascending): each study's name,
    /// kind and experiment file.
    pub suite: Vec<(String, StudyKind, PathBuf)>,
    /// The GPU jobs the suite's in-process studies declare (`study.gpu_job`), in suite order.
    pub gpu_jobs: Vec<(String, GpuJob)>,
    /// The studies PyTorch eager runs as twins, in file order.
    pub pytorch: Vec<String>,
    /// The study whose control the kernel-attribution benchmark times, if any.
    pub attribution: Option<String>,
    /// The study whose glance opens the README's results block, if any.
    pub headline: Option<String>,
    /// Every study's name and experiment file, in file order.
    pub files: Vec<(String, PathBuf)>,
}

impl StudyRoles {
    /// Reads the `[study]` header of every experiment file in `dir` ([`Study::discover`]).
    ///
    /// # Errors
    /// A file that cannot be read, a header that does not parse or whose roles are out of
    /// range ([`Error::Spec`], [`Error::SpecField`] naming the file and field), two studies at
    /// the same `gpu_suite` place, two with `kernel_attribution` or `readme_headline`, or two
    /// files of one study name.
    pub fn discover(dir: &Path) -> Result<StudyRoles> {
        StudyRoles::of_files(&Study::discover(dir)?)
    }

    /// The roles of the studies of `files` (experiment files), read from their `[study]`
    /// headers only.
    ///
    /// # Errors
    /// As [`StudyRoles::discover`].
    pub fn of_files(files: &[PathBuf]) -> Result<StudyRoles> {
        let mut headers: Vec<(PathBuf, StudyHeader)> = Vec::new();
        for path in files.iter().cloned() {
            let text =
                std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
            let h = read_header(&path, &text)?;
            if let Some((first, _)) = headers.iter().find(|(_, o)| o.name == h.name) {
                return Err(clash(&path, "study.name", &h.name, first));
            }
            headers.push((path, h));
        }
        let mut placed: Vec<(u32, &PathBuf, &StudyHeader)> = Vec::new();
        for (path, h) in &headers {
            if let Some(place) = h.gpu_suite {
                if let Some((_, first, _)) = placed.iter().find(|(p, _, _)| *p == place) {
                    return Err(clash(path, "study.gpu_suite", &place.to_string(), first));
                }
                placed.push((place, path, h));
            }
        }
        placed.sort_by_key(|(p, _, _)| *p);
        let attribution = only_one(&headers, "study.kernel_attribution", |h| {
            h.kernel_attribution
        })?;
        let headline = only_one(&headers, "study.readme_headline", |h| h.readme_headline)?;
        Ok(StudyRoles {
            gpu_jobs: placed
                .iter()
                .filter_map(|(_, _, h)| Some((h.name.clone(), h.gpu_job?)))
                .collect(),
            suite: placed
                .into_iter()
                .map(|(_, path, h)| (h.name.clone(), h.kind.clone(), path.clone()))
                .collect(),
            pytorch: headers
                .iter()
                .filter(|(_, h)| h.pytorch_twin)
                .map(|(_, h)| h.name.clone())
                .collect(),
            attribution,
            headline,
            files: headers
                .iter()
                .map(|(path, h)| (h.name.clone(), path.clone()))
                .collect(),
        })
    }

    /// The experiment file of study `name`, if the folder has one.
    pub fn file(&self, name: &str) -> Option<&Path> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_path())
    }

    /// The suite's study names, in order.
    pub fn suite_names(&self) -> Vec<&str> {
        self.suite.iter().map(|(n, _, _)| n.as_str()).collect()
    }

    /// The suite's study whose declared GPU job is the fusion chains
    /// (`study.gpu_job = "fusion_chains"`), which run in the bundle, if any.
    pub fn chains(&self) -> Option<&str> {
        self.gpu_jobs
            .iter()
            .find(|(_, j)| *j == GpuJob::FusionChains)
            .map(|(n, _)| n.as_str())
    }
}

/// The name of the one study of `headers` with the role `has` (the header field `field`), if any.
///
/// # Errors
/// [`Error::SpecField`] naming the second file with the role and the first.
fn only_one(
    headers: &[(PathBuf, StudyHeader)],
    field: &str,
    has: impl Fn(&StudyHeader) -> bool,
) -> Result<Option<String>> {
    let mut found: Option<&PathBuf> = None;
    let mut name = None;
    for (path, h) in headers.iter().filter(|(_, h)| has(h)) {
        if let Some(first) = found {
            return Err(clash(path, field, "true", first));
        }
        found = Some(path);
        name = Some(h.name.clone());
    }
    Ok(name)
}

/// The error for a value only one study may have: `path`'s `field` repeats `value` of `first`.
fn clash(path: &Path, field: &str, value: &str, first: &Path) -> Error {
    Error::SpecField {
        path: path.to_path_buf(),
        field: field.to_string(),
        message: format!(
            "`{value}` is already {}'s: only one study may have it",
            first.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, kind: &str, extra: &str) -> String {
        format!(
            "[study]\nname = \"{name}\"\ntitle = \"t\"\nsource = \"s.txt\"\nkind = \"{kind}\"\n{extra}\n[train]\nsteps = 1\n"
        )
    }

    fn folder(files: &[(&str, String)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn the_suite_runs_in_its_places_and_names_the_chains_study() {
        let dir = folder(&[
            (
                "a.toml",
                header("a", "training", "gpu_suite = 2\npytorch_reference = true"),
            ),
            (
                "b.toml",
                header(
                    "b",
                    "fusion_ir",
                    "gpu_suite = 9\ngpu_job = \"fusion_chains\"",
                ),
            ),
            (
                "c.toml",
                header("c", "training", "gpu_suite = 1\nkernel_attribution = true"),
            ),
            ("d.toml", header("d", "checkmate", "readme_headline = true")),
        ]);
        let r = StudyRoles::discover(dir.path()).unwrap();
        assert_eq!(r.suite_names(), ["c", "a", "b"]);
        assert_eq!(r.chains(), Some("b"));
        assert_eq!(r.pytorch, ["a"]);
        assert_eq!(r.attribution.as_deref(), Some("c"));
        assert_eq!(r.headline.as_deref(), Some("d"));
    }

    #[test]
    fn a_role_twice_or_out_of_place_names_the_file_and_field() {
        let twice = folder(&[
            ("a.toml", header("a", "training", "gpu_suite = 1")),
            ("b.toml", header("b", "training", "gpu_suite = 1")),
        ]);
        let e = StudyRoles::discover(twice.path()).unwrap_err().to_string();
        assert!(
            e.contains("b.toml") && e.contains("study.gpu_suite") && e.contains("a.toml"),
            "{e}"
        );
        let attribution = folder(&[
            (
                "a.toml",
                header("a", "training", "kernel_attribution = true"),
            ),
            (
                "b.toml",
                header("b", "training", "kernel_attribution = true"),
            ),
        ]);
        let e = StudyRoles::discover(attribution.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("study.kernel_attribution"), "{e}");
        let headlines = folder(&[
            ("a.toml", header("a", "training", "readme_headline = true")),
            ("b.toml", header("b", "checkmate", "readme_headline = true")),
        ]);
        let e = StudyRoles::discover(headlines.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("study.readme_headline") && e.contains("a.toml"),
            "{e}"
        );
        let demo = folder(&[("a.toml", header("a", "sixteen_bit", "pytorch_twin = true"))]);
        let e = StudyRoles::discover(demo.path()).unwrap_err().to_string();
        assert!(
            e.contains("study.pytorch_twin") && e.contains("training study"),
            "{e}"
        );
        let zero = folder(&[("a.toml", header("a", "training", "gpu_suite = 0"))]);
        let e = StudyRoles::discover(zero.path()).unwrap_err().to_string();
        assert!(e.contains("study.gpu_suite") && e.contains("from 1"), "{e}");
        // An in-process study in the suite declares the job that runs there; a training
        // study declares none (its jobs are its GPU part); an unknown job is named.
        let undeclared = folder(&[("a.toml", header("a", "fusion_ir", "gpu_suite = 4"))]);
        let e = StudyRoles::discover(undeclared.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("study.gpu_suite") && e.contains("study.gpu_job") && e.contains("a.toml"),
            "{e}"
        );
        let training = folder(&[(
            "a.toml",
            header("a", "training", "gpu_job = \"fusion_chains\""),
        )]);
        let e = StudyRoles::discover(training.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("study.gpu_job") && e.contains("training"), "{e}");
        let unknown = folder(&[(
            "a.toml",
            header("a", "sixteen_bit", "gpu_suite = 5\ngpu_job = \"overflow\""),
        )]);
        let e = StudyRoles::discover(unknown.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("gpu_job") && e.contains("fusion_chains"), "{e}");
    }
}
