//! Byte-level BPE (the GPT-2 scheme, trained with the `tokenizers` crate) and the token cache.

use super::corpus::{load_stories, split_stories, Split, EOS};
use crate::error::{Error, Result};
use crate::spec::{DataConfig, PreparedData};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// Version of the tokenization scheme; part of the cache key.
const SCHEME: &str = "bytelevel-bpe-v1";

/// A trained byte-level BPE tokenizer with `<|endoftext|>` as a special token.
pub struct Bpe {
    inner: Tokenizer,
    eos_id: u32,
}

impl Bpe {
    /// Encodes `text` to token ids (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::tokenizer("encoding", e))
    }

    /// Decodes token ids back to text.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::tokenizer("decoding", e))
    }

    /// Number of tokens, the special token included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Id of `<|endoftext|>`.
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// Writes the tokenizer as `tokenizer.json` (Hugging Face format).
    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, false)
            .map_err(|e| Error::tokenizer(format!("saving {}", path.display()), e))
    }

    /// Reads a `tokenizer.json` written by [`Bpe::save`].
    pub fn load(path: &Path) -> Result<Bpe> {
        let inner = Tokenizer::from_file(path)
            .map_err(|e| Error::tokenizer(format!("loading {}", path.display()), e))?;
        let eos_id = inner.token_to_id(EOS).ok_or_else(|| Error::Tokenizer {
            what: format!("{} has no `{EOS}` token", path.display()),
            source: None,
        })?;
        Ok(Bpe { inner, eos_id })
    }
}

/// Trains a byte-level BPE tokenizer with at most `vocab_size` tokens on `stories`.
///
/// The 256 byte symbols are always in the vocabulary, so every text round-trips; merges are
/// learned until `vocab_size` is reached or no pair occurs twice.
///
/// # Errors
/// [`Error::Tokenizer`] if training fails.
pub fn train_tokenizer(stories: &[String], vocab_size: usize) -> Result<Bpe> {
    let mut tokenizer = Tokenizer::new(BPE::default());
    let byte_level = ByteLevel::default().add_prefix_space(false);
    tokenizer.with_pre_tokenizer(Some(byte_level));
    tokenizer.with_decoder(Some(byte_level));
    let mut trainer: tokenizers::models::TrainerWrapper = BpeTrainer::builder()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(vec![AddedToken::from(EOS, true)])
        .build()
        .into();
    tokenizer
        .train(&mut trainer, stories.iter())
        .map_err(|e| Error::tokenizer("training", e))?;
    let eos_id = tokenizer.token_to_id(EOS).ok_or_else(|| Error::Tokenizer {
        what: format!("trained vocabulary lacks `{EOS}`"),
        source: None,
    })?;
    Ok(Bpe {
        inner: tokenizer,
        eos_id,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CacheMeta {
    fingerprint: String,
    corpus: PathBuf,
    train_stories: usize,
    eval_stories: usize,
    train_tokens: usize,
    eval_tokens: usize,
    vocab_size: usize,
    eos_id: u32,
}

fn write_tokens(path: &Path, stories: &[String], bpe: &Bpe) -> Result<usize> {
    let mut bytes = Vec::new();
    let mut n = 0;
    for story in stories {
        for id in bpe.encode(story)?.into_iter().chain([bpe.eos_id()]) {
            bytes.extend_from_slice(&id.to_le_bytes());
            n += 1;
        }
    }
    crate::record::write_atomic(path, &bytes)?;
    Ok(n)
}

/// Tokenizes the corpus of `cfg` for a vocabulary of `vocab_size`, caching the result under
/// `cache_root/<fingerprint>/` (`tokenizer.json`, `train.tokens`, `eval.tokens`: u32
/// little-endian ids, each story followed by `<|endoftext|>`). A second call with the same
/// corpus and settings reads the cache.
///
/// # Errors
/// Missing or unreadable corpus ([`Error::MissingData`], [`Error::BadData`]), tokenizer
/// failures, and I/O errors writing the cache.
pub fn prepare(cfg: &DataConfig, vocab_size: usize, cache_root: &Path) -> Result<PreparedData> {
    if !cfg.path.is_file() {
        // Reports the missing file with where to get it (or that it is a directory).
        load_stories(&cfg.path, None)?;
    }
    let fingerprint = fingerprint(cfg, vocab_size)?;
    let dir = cache_root.join(&fingerprint);
    if let Some(cached) = read_cache(&dir, &fingerprint) {
        return Ok(cached);
    }
    let split = load_split(cfg)?;
    tracing::info!(
        "training a {vocab_size}-token byte-level BPE on {} stories",
        split.train.len()
    );
    let bpe = train_tokenizer(&split.train, vocab_size)?;
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    bpe.save(&dir.join("tokenizer.json"))?;
    let train_tokens = write_tokens(&dir.join("train.tokens"), &split.train, &bpe)?;
    let eval_tokens = write_tokens(&dir.join("eval.tokens"), &split.eval, &bpe)?;
    let meta = CacheMeta {
        fingerprint: fingerprint.clone(),
        corpus: cfg.path.clone(),
        train_stories: split.train.len(),
        eval_stories: split.eval.len(),
        train_tokens,
        eval_tokens,
        vocab_size: bpe.vocab_size(),
        eos_id: bpe.eos_id(),
    };
    let json = serde_json::to_vec_pretty(&meta).expect("cache meta serializes");
    crate::record::write_atomic(&dir.join("meta.json"), &json)?;
    Ok(PreparedData {
        dir,
        fingerprint,
        vocab_size: meta.vocab_size,
        eos_id: meta.eos_id,
    })
}

/// The cache folder's name: the first 8 bytes (hex) of the SHA-256 of the scheme, the corpus
/// file and the settings that change the tokens (eval fraction, story cap, vocabulary size).
fn fingerprint(cfg: &DataConfig, vocab_size: usize) -> Result<String> {
    let corpus = std::fs::read(&cfg.path).map_err(|e| Error::io("reading", &cfg.path, e))?;
    let mut h = Sha256::new();
    h.update(SCHEME.as_bytes());
    h.update(&corpus);
    h.update(
        format!(
            "|{}|{:?}|{}",
            cfg.eval_fraction, cfg.max_stories, vocab_size
        )
        .as_bytes(),
    );
    Ok(h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The corpus tokenized earlier in `dir`, or `None` where its `meta.json` is missing or does
/// not read (the corpus is tokenized again).
fn read_cache(dir: &Path, fingerprint: &str) -> Option<PreparedData> {
    let text = std::fs::read_to_string(dir.join("meta.json")).ok()?;
    let meta = serde_json::from_str::<CacheMeta>(&text).ok()?;
    tracing::info!(
        "tokenized corpus cached at {} ({} train / {} eval tokens)",
        dir.display(),
        meta.train_tokens,
        meta.eval_tokens
    );
    Some(PreparedData {
        dir: dir.to_path_buf(),
        fingerprint: fingerprint.to_string(),
        vocab_size: meta.vocab_size,
        eos_id: meta.eos_id,
    })
}

/// The corpus's stories split into training and evaluation stories.
///
/// # Errors
/// An unreadable corpus, and one with too few stories for a story on each side.
fn load_split(cfg: &DataConfig) -> Result<Split> {
    let stories = load_stories(&cfg.path, cfg.max_stories)?;
    let split = split_stories(stories, cfg.eval_fraction);
    if split.train.is_empty() || split.eval.is_empty() {
        let n = split.train.len() + split.eval.len();
        let cap = cfg
            .max_stories
            .filter(|&m| m <= n)
            .map(|m| format!(", or raise `data.max_stories` (now {m})"))
            .unwrap_or_default();
        return Err(Error::BadData {
            path: cfg.path.clone(),
            message: format!(
                "{n} story after splitting at `{EOS}`: training and evaluation need at least \
                 one story each (2 in all); use a corpus with more stories{cap}"
            ),
        });
    }
    Ok(split)
}
