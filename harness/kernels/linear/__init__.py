"""The one linear-attention kernel every feature-map attention shares, and the feature-map contract.

out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

(sums over j <= i in the causal form). Masking (padded keys contribute nothing), the normaliser
guard, the random-feature redraw schedule and speed live here, once, one job per file:

- `contract`: what a feature map is (`FeatureMap`) and how it hands blocks of features over (`FeatureChunk`).
- `attention`: `LinearKernelAttention`, one feature map over the kernel: the module, its recurrent form and cost.
- `route`: `choose_route`, the one place that picks a rendering for a call, from the map's optional fast form
  (`FeatureMap.native_spec`); `LinearKernelAttention` counts what it picked (`attnbench.kernels.routes`).
- `cpu_threads`: blocks of rows per CPU thread, per-thread scratch buffers, torch's thread count.

Four renderings of the same formula, sibling files:
- `parallel.linear_attention(phi_q, phi_k, v)`: from materialised features (B, H, N, M); differentiable, also
  causal. Used for the causal form with gradients. `parallel.factored_linear_attention(q_chunk, k_chunk, v)`:
  the same, non-causal, from features in factored form (see below) without materialising them: the training
  path in PyTorch.
- `fused.fused_linear_attention(spec, q, k, v)`: non-causal, through the fused CPU kernels
  (`attnbench.kernels.native`) where the map gives a `native_spec`: without gradients, and with them where its
  projection takes none.
- `chunked.pytorch_chunked_attention(feature_map, q, k, v)`: without gradients (inference), non-causal, in
  PyTorch (`route.chunked_linear_attention` takes the fused kernels instead where they support the map). Walks
  the sequence in blocks of rows whose (rows, M) feature block stays in cache: key features of a block
  -> accumulate phi_k^T v and sum phi_k; then query features of a block -> phi_q @ state. Never holds
  an (N, M) tensor, so memory is O(N D + M D) and every feature element is touched while in cache.
  Feature maps hand blocks over as `FeatureChunk`s: values with a constant scale and offset kept
  apart (applied to the small (M, D) state instead of every feature), per-row weights (folded into
  the block's values v, C x D, instead of the C x M features) and, for maps whose key features carry
  a stabiliser over the whole sequence (favor), a per-block log-scale that the kernel combines across
  blocks exactly (a running maximum, as in flash attention). Maps write a block's values into a
  per-thread workspace the kernel hands them (`out`), so the loop over blocks allocates nothing of
  the features' size: fresh memory costs page faults that would otherwise take a third of the time.
"""
