/* tools_api.h: the internal interfaces the cpulm command (tools/) may use beyond cpulm.h.
 * A tool includes cpulm.h, its own headers under tools/ and this file; nothing else from src/
 * (scripts/check-layers.sh checks it: the tools module may include only this file).
 * Each group is here because a tool needs more than an application does:
 *   - text utilities: growable buffers and JSON, for the bench, chat and loadtest output;
 *   - files: GGUF reading, element types, the quantizer's per-tensor rules and synthetic
 *     models, for `quantize`, `synth` and `plan` (sizes of models that are not on disk);
 *   - memory: the weights + KV + scratch computation, for `plan` and `report`;
 *   - the server library (server/server.h: `serve`), and its HTTP parser, reused by the
 *     loadtest client;
 *   - kernels, repacking and topology, for `roofline`'s machine ceilings (peak GEMM,
 *     bandwidth), which measure the kernels themselves;
 *   - grammars (GBNF, JSON schema) and their token masks, for `run --grammar/--json-schema`
 *     and `grammar-bench`;
 *   - speculative decoding (drafters, verification), for `run` and `bench` --spec / -md. */
#ifndef CPULM_TOOLS_API_H
#define CPULM_TOOLS_API_H

#include "cpulm.h"

#include "base/buf.h"
#include "base/json.h"
#include "base/mmap.h"
#include "base/status.h"
#include "format/gguf.h"
#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "runtime/memory.h"
#include "model/model.h"
#include "model/repack.h"
#include "format/quant.h"
#include "toolkit/quantize_plan.h"
#include "server/http.h"
#include "server/server.h"
#include "server/sched.h"
#include "spec/spec.h"
#include "toolkit/synth.h"
#include "threads/topo.h"

#endif
