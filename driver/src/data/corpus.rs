//! TinyStories readers and the by-story split.

use crate::error::{Error, Result};
use std::path::Path;

/// The story separator of the TinyStories text files (and memwall's end-of-text token).
pub const EOS: &str = "<|endoftext|>";

fn missing_hint() -> String {
    "A relative `data.path` is looked up under the repository, in $MEMWALL_DATA_DIR, data/, \
     ~/.cache/memwall and ../shared/data: put the file there under that path (TinyStories: \
     roneneldan/TinyStories on Hugging Face), or name a TinyStories file with `--data` or \
     `MEMWALL_DATA`."
        .to_string()
}

/// Splits TinyStories plain text into stories: blocks separated by `<|endoftext|>`, trimmed,
/// empty blocks dropped.
pub fn parse_text(text: &str) -> Vec<String> {
    text.split(EOS)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Reads the stories of a TinyStories file: plain text (`.txt`, stories separated by
/// `<|endoftext|>`) or Parquet (`.parquet`, one story per row of the `text` column).
/// Keeps at most `max_stories` (in file order) if set.
///
/// # Errors
/// [`Error::MissingData`] if the file does not exist (with where to get it),
/// [`Error::BadData`] if it is a directory, empty, not UTF-8, plain text without a
/// `<|endoftext|>` separator, holds no story, `max_stories` is 0, or the Parquet file has no
/// `text` column.
pub fn load_stories(path: &Path, max_stories: Option<usize>) -> Result<Vec<String>> {
    if !path.exists() {
        return Err(Error::MissingData {
            path: path.to_path_buf(),
            hint: missing_hint(),
        });
    }
    let bad = |message: String| Error::BadData {
        path: path.to_path_buf(),
        message,
    };
    if path.is_dir() {
        return Err(bad(
            "is a directory: point `data.path` (or `--data`) at a TinyStories .txt or .parquet file"
                .into(),
        ));
    }
    let is_parquet = path.extension().is_some_and(|e| e == "parquet");
    let mut stories = if is_parquet {
        read_parquet(path)?
    } else {
        read_text(path)?
    };
    if stories.is_empty() {
        return Err(bad(if is_parquet {
            "no story: every row of the `text` column is empty or null".into()
        } else {
            format!("no story: the file holds only `{EOS}` separators and blank lines")
        }));
    }
    if let Some(max) = max_stories {
        if max == 0 {
            return Err(bad(
                "`data.max_stories` = 0 keeps no story: set it to at least 2, or remove it to \
                 use every story"
                    .into(),
            ));
        }
        stories.truncate(max);
    }
    Ok(stories)
}

/// The stories of a TinyStories plain-text file: UTF-8, with `<|endoftext|>` between stories.
fn read_text(path: &Path) -> Result<Vec<String>> {
    let bad = |message: String| Error::BadData {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        bad(format!(
            "not UTF-8 text (invalid byte at offset {}): memwall reads TinyStories plain text \
             (.txt, UTF-8) or Parquet (a file ending in .parquet with a `text` column)",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(bad(format!(
            "the file is empty: it should hold TinyStories stories separated by `{EOS}` lines \
             (run `just data`, or `just data-full` for the `full` profile's file, or point `data.path` or `--data` at another file)"
        )));
    }
    if !text.contains(EOS) {
        return Err(bad(format!(
            "no `{EOS}` separator in {} bytes of text: memwall splits a plain-text corpus into \
             stories at `{EOS}` (the TinyStories format), and needs at least 2 stories (one to \
             train on, one held out). Put a line `{EOS}` after each story, or use a Parquet \
             file with one story per row of its `text` column",
            text.len()
        )));
    }
    Ok(parse_text(&text))
}

fn read_parquet(path: &Path) -> Result<Vec<String>> {
    use polars::prelude::*;
    let bad = |m: String| Error::BadData {
        path: path.to_path_buf(),
        message: m,
    };
    let file = std::fs::File::open(path).map_err(|e| Error::io("opening", path, e))?;
    let df = ParquetReader::new(file)
        .finish()
        .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
    let col = df.column("text").map_err(|_| {
        bad("no `text` column (expected the Hugging Face TinyStories schema)".into())
    })?;
    let text = col
        .str()
        .map_err(|_| bad("the `text` column is not a string column".into()))?;
    Ok(text
        .iter()
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// Stories split into training and evaluation sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Training stories, in file order.
    pub train: Vec<String>,
    /// Held-out stories, in file order.
    pub eval: Vec<String>,
}

/// 64-bit FNV-1a of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Deterministic by-story split: a story goes to eval when the FNV-1a hash of its text falls
/// in the lowest `eval_fraction` of the hash range, so the split does not depend on file order
/// and a story is never in both sets (duplicated stories land on the same side). At least one
/// story goes to each side when there are two or more.
pub fn split_stories(stories: Vec<String>, eval_fraction: f64) -> Split {
    let threshold = (eval_fraction.clamp(0.0, 1.0) * u64::MAX as f64) as u64;
    let (mut eval, mut train): (Vec<_>, Vec<_>) = stories
        .into_iter()
        .partition(|s| fnv1a(s.as_bytes()) < threshold);
    if eval.is_empty() && train.len() >= 2 {
        eval.push(train.pop().expect("non-empty"));
    }
    if train.is_empty() && eval.len() >= 2 {
        train.push(eval.pop().expect("non-empty"));
    }
    Split { train, eval }
}
