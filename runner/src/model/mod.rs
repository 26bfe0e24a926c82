//! The decoder-only transformer language model (pre-norm, causal attention, learned document
//! positions, optional head tying), written as Burn modules.
//!
//! Shapes: token ids `[batch, seq]`, hidden states `[batch, seq, d_model]`, logits
//! `[batch * seq, vocab]`.
//!
//! Attention is [`attention::Attention`]: the memory-efficient tiled attention (a custom autodiff
//! operation that rematerializes the score tiles in backward) by default, or Burn's naive one. Parameter count per block: `4 d^2` (attention, no biases) +
//! `2 d d_ff` (MLP, no biases) + `4 d` (two LayerNorms); plus `vocab d` (tokens), `seq d`
//! (positions), `2 d` (final norm) and, untied, `vocab d` (head).

pub mod attention;
pub mod cast;
#[cfg(feature = "cuda")]
pub mod custom_op;
pub mod exp;
pub mod gelu;
pub mod heads;
pub mod linear;
pub mod norm;
pub mod optim;
mod unary;

use attention::{memory_efficient_attention, Attention, AttentionBackend};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::nn::{
    Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::tensor::backend::Backend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Int, Tensor, TensorPrimitive};
use exp::{log_softmax, ExpBackend};
use gelu::{gelu, GeluBackend};
use heads::{merge_heads, split_heads, HeadsBackend};
use linear::{linear, MatmulBackend};
use memwall_core::spec::{ModelConfig, Precision};
use norm::{layer_norm, LayerNormSaving, NormBackend};
use optim::{AdafactorBackend, AdamWBackend};

/// One pre-norm transformer block: `x + attn(ln(x))`, then `x + mlp(ln(x))`.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    /// Layer norm before attention, over `d_model`.
    pub norm_attn: LayerNorm<B>,
    /// Query projection, `d_model -> d_model` (no bias).
    pub query: Linear<B>,
    /// Key projection, `d_model -> d_model` (no bias).
    pub key: Linear<B>,
    /// Value projection, `d_model -> d_model` (no bias).
    pub value: Linear<B>,
    /// Attention output projection, `d_model -> d_model` (no bias).
    pub attn_out: Linear<B>,
    /// Layer norm before the MLP, over `d_model`.
    pub norm_mlp: LayerNorm<B>,
    /// MLP input projection, `d_model -> d_ff` (no bias), followed by GELU.
    pub mlp_in: Linear<B>,
    /// MLP output projection, `d_ff -> d_model` (no bias).
    pub mlp_out: Linear<B>,
    /// Attention heads (each of `d_model / heads` features).
    pub heads: usize,
    /// Which attention the block runs.
    #[module(skip)]
    pub attention: Attention,
    /// What the block's layer norms keep for backward.
    #[module(skip)]
    pub layer_norm: LayerNormSaving,
}

/// Backends that run the model's custom operations: the memory-efficient attention, the layer
/// norm, GELU, the heads' split and merge and the matrix products ([`AttentionBackend`],
/// [`NormBackend`], [`GeluBackend`], [`HeadsBackend`], [`MatmulBackend`]), and the training
/// step's optimizer updates ([`AdamWBackend`], [`AdafactorBackend`]).
pub trait ModelBackend:
    AttentionBackend
    + NormBackend
    + GeluBackend
    + HeadsBackend
    + MatmulBackend
    + ExpBackend
    + AdamWBackend
    + AdafactorBackend
{
}

impl<B> ModelBackend for B where
    B: AttentionBackend
        + NormBackend
        + GeluBackend
        + HeadsBackend
        + MatmulBackend
        + ExpBackend
        + AdamWBackend
        + AdafactorBackend
{
}

impl<B: ModelBackend> Block<B> {
    /// `[batch, seq, d_model] -> [batch, seq, d_model]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let h = layer_norm(&self.norm_attn, x.clone(), self.layer_norm);
        let split = |y: Tensor<B, 3>| split_heads(y, self.heads);
        let q = split(linear(&self.query, h.clone()));
        let k = split(linear(&self.key, h.clone()));
        let v = split(linear(&self.value, h));
        let a = match self.attention {
            Attention::Naive => {
                let options = AttentionModuleOptions {
                    scale: None,
                    softcap: None,
                    is_causal: true,
                };
                attention(q, k, v, None, None, options)
            }
            Attention::MemoryEfficient { tiles } => memory_efficient_attention(q, k, v, tiles),
        };
        let a = merge_heads(a);
        let x = x + linear(&self.attn_out, a);
        let h = layer_norm(&self.norm_mlp, x.clone(), self.layer_norm);
        let h = linear(&self.mlp_out, gelu(linear(&self.mlp_in, h)));
        x + h
    }
}

/// The language model.
#[derive(Module, Debug)]
pub struct TransformerLm<B: Backend> {
    /// Token embedding, `[vocab, d_model]` (also the head's weight when tied).
    pub token_embedding: Embedding<B>,
    /// Document-position embedding, `[seq_len, d_model]`.
    pub position_embedding: Embedding<B>,
    /// The transformer blocks, in order.
    pub blocks: Vec<Block<B>>,
    /// Layer norm before the head, over `d_model`.
    pub norm_final: LayerNorm<B>,
    /// `None` when the head is tied to the token embedding.
    pub head: Option<Linear<B>>,
    /// What the final layer norm keeps for backward (the blocks' own setting is theirs).
    #[module(skip)]
    pub layer_norm: LayerNormSaving,
    /// The head's logits recomputed in backward in this many chunks of rows
    /// (`crate::train::head`); `None`: the head runs under autodiff and keeps them.
    #[module(skip)]
    pub head_chunks: Option<usize>,
}

fn new_linear<B: Backend>(i: usize, o: usize, device: &B::Device) -> Linear<B> {
    LinearConfig::new(i, o).with_bias(false).init(device)
}

/// `ModelConfig -> init(&device) -> module`, Burn's configuration pattern, for the experiment
/// file's model (the config is data in `memwall-core`; the module is Burn's, here).
pub trait InitModel {
    /// Builds the model on `device` with f32 parameters (see [`cast_model`] for 16-bit), the
    /// default (memory-efficient) attention (see [`TransformerLm::with_attention`]) and the
    /// default layer norm (see [`TransformerLm::with_layer_norm`]).
    fn init<B: Backend>(&self, device: &B::Device) -> TransformerLm<B>;
}

impl InitModel for ModelConfig {
    fn init<B: Backend>(&self, device: &B::Device) -> TransformerLm<B> {
        let d = self.d_model;
        let emb_init = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let blocks = (0..self.layers)
            .map(|_| Block {
                norm_attn: LayerNormConfig::new(d).init(device),
                query: new_linear(d, d, device),
                key: new_linear(d, d, device),
                value: new_linear(d, d, device),
                attn_out: new_linear(d, d, device),
                norm_mlp: LayerNormConfig::new(d).init(device),
                mlp_in: new_linear(d, self.d_ff, device),
                mlp_out: new_linear(self.d_ff, d, device),
                heads: self.heads,
                attention: Attention::default(),
                layer_norm: LayerNormSaving::default(),
            })
            .collect();
        let model = TransformerLm {
            token_embedding: EmbeddingConfig::new(self.vocab, d)
                .with_initializer(emb_init.clone())
                .init(device),
            position_embedding: EmbeddingConfig::new(self.seq_len, d)
                .with_initializer(emb_init)
                .init(device),
            blocks,
            norm_final: LayerNormConfig::new(d).init(device),
            head: (!self.tie_embeddings).then(|| new_linear(d, self.vocab, device)),
            layer_norm: LayerNormSaving::default(),
            head_chunks: None,
        };
        materialize(&model);
        model
    }
}

impl<B: Backend> TransformerLm<B> {
    /// The same model with every block running `attention`.
    pub fn with_attention(mut self, attention: Attention) -> Self {
        for block in &mut self.blocks {
            block.attention = attention;
        }
        self
    }

    /// The same model with every layer norm (the blocks' and the final one) keeping what
    /// `saving` says for backward.
    pub fn with_layer_norm(mut self, saving: LayerNormSaving) -> Self {
        for block in &mut self.blocks {
            block.layer_norm = saving;
        }
        self.layer_norm = saving;
        self
    }

    /// The same model with its head's logits recomputed in backward in `chunks` chunks of rows
    /// (`None`: kept, under autodiff); see `crate::train::head`.
    pub fn with_head_chunks(mut self, chunks: Option<usize>) -> Self {
        self.head_chunks = chunks;
        self
    }

    /// Token plus document-position embeddings: `[batch, seq]` ids -> `[batch, seq, d_model]`.
    pub fn embed(&self, tokens: Tensor<B, 2, Int>, positions: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.token_embedding.forward(tokens) + self.position_embedding.forward(positions)
    }
}

impl<B: ModelBackend> TransformerLm<B> {
    /// Final norm and head: `[batch, seq, d]` -> logits `[batch * seq, vocab]`.
    pub fn logits(&self, h: Tensor<B, 3>) -> Tensor<B, 2> {
        let [b, t, d] = h.dims();
        let h = layer_norm(&self.norm_final, h, self.layer_norm).reshape([b * t, d]);
        match &self.head {
            Some(head) => float(B::model_linear(primitive(h), primitive(head.weight.val()))),
            None => float(B::model_linear(
                primitive(h),
                primitive(self.token_embedding.weight.val().transpose()),
            )),
        }
    }

    /// Mean next-token cross-entropy (nats), computed in f32 whatever the parameter dtype.
    /// `targets` is `[batch, seq]`.
    pub fn loss(&self, h: Tensor<B, 3>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let logits = self.logits(h).cast(DType::F32);
        let [n, _] = logits.dims();
        let logp = log_softmax(logits, 1);
        let picked = logp.gather(1, targets.reshape([n, 1]));
        picked.mean().neg()
    }

    /// Runs blocks `range` on `h`.
    pub fn forward_blocks(
        &self,
        mut h: Tensor<B, 3>,
        range: std::ops::Range<usize>,
    ) -> Tensor<B, 3> {
        for block in &self.blocks[range] {
            h = block.forward(h);
        }
        h
    }

    /// The whole forward pass to the loss.
    pub fn forward_loss(
        &self,
        tokens: Tensor<B, 2, Int>,
        positions: Tensor<B, 2, Int>,
        targets: Tensor<B, 2, Int>,
    ) -> Tensor<B, 1> {
        let h = self.embed(tokens, positions);
        let h = self.forward_blocks(h, 0..self.blocks.len());
        self.loss(h, targets)
    }
}

/// A float primitive as a tensor of rank `D` (the custom autodiff operations work on primitives).
fn float<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// A float tensor's primitive.
fn primitive<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// Burn initializes parameters lazily, on first use, and a clone of an uninitialized
/// parameter initializes on its own with fresh random values. Touching every parameter once
/// right after construction makes clones (and `valid()` copies) share the same values.
fn materialize<B: Backend, M: Module<B>>(model: &M) {
    struct Touch;
    impl<B: Backend> ModuleVisitor<B> for Touch {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let _ = param.val();
        }
    }
    model.visit(&mut Touch);
}

/// Casts every float parameter to `dtype`, keeping parameter ids (so optimizer state and
/// gradients line up) and making each a fresh leaf that requires gradients.
struct CastParams(DType);

impl<B: Backend> ModuleMapper<B> for CastParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let cast = tensor.cast(self.0).detach().require_grad();
        Param::from_mapped_value(id, cast, mapper)
    }
}

/// The Burn dtype of a precision.
pub fn dtype_of(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::F16 => DType::F16,
        Precision::Bf16 => DType::BF16,
    }
}

/// Casts a model's parameters (and so its activations) to `precision`.
pub fn cast_model<B: Backend, M: Module<B>>(model: M, precision: Precision) -> M {
    if precision == Precision::F32 {
        return model;
    }
    model.map(&mut CastParams(dtype_of(precision)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn parameter_count_matches_the_module() {
        for tie in [true, false] {
            let cfg = ModelConfig {
                layers: 2,
                d_model: 16,
                heads: 2,
                d_ff: 32,
                seq_len: 8,
                batch: 2,
                vocab: 300,
                tie_embeddings: tie,
            };
            let model = cfg.init::<Flex>(&Default::default());
            assert_eq!(model.num_params() as u64, cfg.parameter_count());
        }
    }

    #[test]
    fn full_profile_is_the_seed_sized_model() {
        let cfg = ModelConfig {
            layers: 32,
            d_model: 2048,
            heads: 16,
            d_ff: 8192,
            seq_len: 768,
            batch: 4,
            vocab: 8192,
            tie_embeddings: true,
        };
        let n = cfg.parameter_count();
        assert!((1.6e9..1.7e9).contains(&(n as f64)), "{n}");
    }
}
