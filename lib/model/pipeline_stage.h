// Which part of the model one pipeline chunk computes: the layers [begin_layer, end_layer), the
// embeddings when it is the first chunk, the final LayerNorm and the head when it is the last.
// A single process's chunk is the whole model. With pipeline parallelism (pp stages, vpp virtual
// stages each) the layers are cut into pp·vpp equal chunks in Megatron's interleaved order: chunk
// c = v·pp + s is stage s's v-th, so activations visit stages 0, 1, ..., pp−1, 0, 1, ... in turn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magic {

struct PipelineStage {
  int64_t begin_layer = 0;
  int64_t end_layer = -1;  // −1: through the model's last layer
  bool embeds = true;      // input: token ids [B, T] (else the previous chunk's hidden states [B, T, d])
  bool heads = true;       // output: logits (else hidden states [B, T, d] for the next chunk)

  // The layer after this chunk's last, for a model of `n_layers`.
  int64_t end(int64_t n_layers) const { return end_layer < 0 ? n_layers : end_layer; }
  bool whole() const { return begin_layer == 0 && end_layer < 0 && embeds && heads; }
};

// The chunks pipeline stage `stage` of `pp` computes, vpp of them in the order they run (virtual
// stage 0 first). InputError naming `what` unless pp·vpp chunks of equal length split the layers:
// pp and vpp >= 1, 0 <= stage < pp, n_layers divisible by pp·vpp.
std::vector<PipelineStage> pipeline_chunks(int64_t n_layers, int64_t pp, int64_t vpp, int64_t stage,
                                           const std::string& what);

}  // namespace magic
