//! The TinyStories loader, the by-story split and the tokenizer on the real excerpt.

mod common;

use memwall_core::error::Error;
use memwall_driver::data::{load_stories, split_stories, train_tokenizer};

#[test]
fn loads_every_story_of_the_excerpt() {
    let stories = load_stories(&common::excerpt(), None).unwrap();
    // The excerpt holds 231 whole stories (../shared/data/README.md).
    assert_eq!(stories.len(), 231);
    assert!(stories
        .iter()
        .all(|s| !s.contains("<|endoftext|>") && !s.trim().is_empty()));
    let capped = load_stories(&common::excerpt(), Some(10)).unwrap();
    assert_eq!(capped, stories[..10].to_vec());
}

#[test]
fn split_is_by_story_disjoint_and_deterministic() {
    let stories = load_stories(&common::excerpt(), None).unwrap();
    let a = split_stories(stories.clone(), 0.1);
    let b = split_stories(stories.iter().rev().cloned().collect(), 0.1);
    assert_eq!(a.train.len() + a.eval.len(), stories.len());
    assert!(!a.eval.is_empty() && !a.train.is_empty());
    // no eval story is in the training set
    assert!(a.eval.iter().all(|e| !a.train.contains(e)));
    // membership does not depend on file order
    let mut ae = a.eval.clone();
    let mut be = b.eval.clone();
    ae.sort();
    be.sort();
    assert_eq!(ae, be);
    // roughly the asked fraction
    let frac = a.eval.len() as f64 / stories.len() as f64;
    assert!((0.03..0.2).contains(&frac), "eval fraction {frac}");
}

#[test]
fn tokenizer_round_trips_held_out_text() {
    let stories = load_stories(&common::excerpt(), None).unwrap();
    let split = split_stories(stories, 0.1);
    let bpe = train_tokenizer(&split.train, 1024).unwrap();
    assert!(
        bpe.vocab_size() <= 1024 && bpe.vocab_size() > 256,
        "{}",
        bpe.vocab_size()
    );
    for story in split.eval.iter().take(5) {
        let ids = bpe.encode(story).unwrap();
        assert!(
            ids.len() < story.len(),
            "BPE must compress: {} ids for {} bytes",
            ids.len(),
            story.len()
        );
        assert_eq!(&bpe.decode(&ids).unwrap(), story);
    }
    // text the tokenizer never saw, with bytes outside ASCII, still round-trips
    let odd = "Zebra-fish ünïcödé 🚀 <tags> 12345";
    assert_eq!(bpe.decode(&bpe.encode(odd).unwrap()).unwrap(), odd);
}

#[test]
fn missing_data_file_names_the_file_and_the_fix() {
    let err = load_stories(
        std::path::Path::new("/nonexistent/TinyStories-valid.txt"),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, Error::MissingData { .. }));
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/TinyStories-valid.txt"), "{msg}");
    assert!(
        msg.contains("MEMWALL_DATA_DIR") && msg.contains("--data"),
        "{msg}"
    );
}
