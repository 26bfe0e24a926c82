//! Token streams and batches: `[batch, seq_len]` inputs, next-token targets and document
//! positions.

use memwall_core::error::{Error, Result};
use std::path::Path;

/// A stream of token ids (stories joined, each followed by `<|endoftext|>`).
#[derive(Debug, Clone)]
pub struct TokenStream {
    /// Token ids, in corpus order.
    pub tokens: Vec<u32>,
    /// Id of `<|endoftext|>`, which ends each story.
    pub eos_id: u32,
}

impl TokenStream {
    /// Reads a `.tokens` file (u32 little-endian ids) written by `data::prepare`.
    pub fn read(path: &Path, eos_id: u32) -> Result<TokenStream> {
        let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
        if bytes.len() % 4 != 0 {
            return Err(Error::BadData {
                path: path.to_path_buf(),
                message: "length is not a multiple of 4 bytes (u32 token ids)".into(),
            });
        }
        let tokens = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(TokenStream { tokens, eos_id })
    }
}

/// One batch, row-major `[batch, seq_len]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Rows (sequences) in the batch.
    pub batch: usize,
    /// Tokens per row.
    pub seq_len: usize,
    /// Input token ids.
    pub inputs: Vec<i64>,
    /// Next-token targets (`inputs` shifted by one).
    pub targets: Vec<i64>,
    /// Document positions: 0 at the start of each window and after each `<|endoftext|>`, so a
    /// story's tokens are numbered from its own start.
    pub positions: Vec<i64>,
}

/// Draws batches of windows of `seq_len + 1` tokens from a stream.
#[derive(Debug, Clone)]
pub struct Batcher {
    stream: TokenStream,
    batch: usize,
    seq_len: usize,
    rng: u64,
}

/// splitmix64 (Steele et al., 2014): a small, well-mixed PRNG for window offsets.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Batcher {
    /// # Errors
    /// [`Error::BadData`] when the stream is shorter than one window (`seq_len + 1` tokens).
    pub fn new(stream: TokenStream, batch: usize, seq_len: usize, seed: u64) -> Result<Batcher> {
        if stream.tokens.len() < seq_len + 1 {
            return Err(Error::BadData {
                path: "token stream".into(),
                message: format!(
                    "{} tokens is fewer than one window of seq_len + 1 = {}: use a larger corpus or a shorter seq_len",
                    stream.tokens.len(),
                    seq_len + 1
                ),
            });
        }
        Ok(Batcher {
            stream,
            batch,
            seq_len,
            rng: seed,
        })
    }

    /// Number of non-overlapping windows in the stream.
    pub fn windows(&self) -> usize {
        (self.stream.tokens.len() - 1) / self.seq_len
    }

    fn assemble(&self, offsets: impl Iterator<Item = usize>) -> Batch {
        let t = self.seq_len;
        let mut b = Batch {
            batch: self.batch,
            seq_len: t,
            inputs: Vec::with_capacity(self.batch * t),
            targets: Vec::with_capacity(self.batch * t),
            positions: Vec::with_capacity(self.batch * t),
        };
        for off in offsets {
            let w = &self.stream.tokens[off..off + t + 1];
            let mut pos = 0i64;
            for j in 0..t {
                b.inputs.push(i64::from(w[j]));
                b.targets.push(i64::from(w[j + 1]));
                b.positions.push(pos);
                pos = if w[j] == self.stream.eos_id {
                    0
                } else {
                    pos + 1
                };
            }
        }
        b
    }

    /// A training batch of windows at random offsets (deterministic for a seed).
    pub fn next_random(&mut self) -> Batch {
        let max_off = self.stream.tokens.len() - self.seq_len - 1;
        let offsets: Vec<usize> = (0..self.batch)
            .map(|_| (splitmix64(&mut self.rng) % (max_off as u64 + 1)) as usize)
            .collect();
        self.assemble(offsets.into_iter())
    }

    /// The `i`-th evaluation batch: consecutive non-overlapping windows, wrapping around the
    /// stream when it holds fewer than needed.
    pub fn sequential(&self, i: usize) -> Batch {
        let n = self.windows();
        let offsets = (0..self.batch).map(move |r| ((i * self.batch + r) % n) * self.seq_len);
        self.assemble(offsets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_restart_after_end_of_text() {
        let stream = TokenStream {
            tokens: vec![5, 6, 0, 7, 8, 9, 0, 1, 2],
            eos_id: 0,
        };
        let b = Batcher::new(stream, 1, 8, 1).unwrap();
        let batch = b.sequential(0);
        assert_eq!(batch.inputs, vec![5, 6, 0, 7, 8, 9, 0, 1]);
        assert_eq!(batch.targets, vec![6, 0, 7, 8, 9, 0, 1, 2]);
        assert_eq!(batch.positions, vec![0, 1, 2, 0, 1, 2, 3, 0]);
    }

    #[test]
    fn random_batches_are_deterministic_per_seed() {
        let stream = TokenStream {
            tokens: (0..1000).collect(),
            eos_id: 999_999,
        };
        let mut a = Batcher::new(stream.clone(), 4, 16, 7).unwrap();
        let mut b = Batcher::new(stream.clone(), 4, 16, 7).unwrap();
        let mut c = Batcher::new(stream, 4, 16, 8).unwrap();
        let (x, y, z) = (a.next_random(), b.next_random(), c.next_random());
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert!(x.inputs.iter().zip(&x.targets).all(|(i, t)| t - i == 1));
    }

    #[test]
    fn too_short_stream_is_an_error() {
        let stream = TokenStream {
            tokens: vec![1, 2, 3],
            eos_id: 0,
        };
        assert!(Batcher::new(stream, 1, 8, 0).is_err());
    }
}
