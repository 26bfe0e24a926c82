//! Corpus loading, the train/eval split, the tokenizer and batching; fetching the data sets of
//! the manifest ([`fetch`]).
//!
//! The driver prepares a corpus once per study ([`prepare`]): it reads the stories, splits them
//! by story (eval stories are never seen in training), trains a byte-level BPE tokenizer on the
//! training split, and writes the token streams to a cache directory keyed by the corpus and
//! vocabulary. Jobs read only the token streams ([`TokenStream`]), so the runner carries no
//! text-processing dependencies.

mod corpus;
pub mod fetch;
mod tokenizer;

pub use corpus::{load_stories, parse_text, split_stories, Split, EOS};
pub use memwall_runner::data::{Batch, Batcher, TokenStream};
pub use tokenizer::{prepare, train_tokenizer, Bpe};
