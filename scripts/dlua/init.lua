-- dlua: the differentiable scripting runtime's Lua module.
--
--   local dl = require("dlua")
--   local x = dl.tensor({{1, 2}, {3, 4}})
--   print(x:matmul(x):sum())      -- tensor(54., shape=(), dtype=float32)
--
-- The contract is the guides in docs/ (tensors.md, autograd.md, training.md ...). The pieces, all
-- internal (scripts use only this):
--   dlua.core      the C ABI through the LuaJIT FFI, errors, collector stepping
--   dlua.tensor    the tensor type, creation, ops, indexing
--   dlua.format    printing
--   dlua.autograd  gradients (loaded when present)
--   dlua.compile   dl.compile: a function's tensor work deferred, traced and fused
--   dlua.io, dlua.checkpoint, dlua.summary, dlua.progress   files, checkpoints,
--                  TensorBoard summaries, progress bars
--   dlua.nn, dlua.optim, dlua.data, dlua.metrics   models and losses, optimizers,
--                  input pipelines, metrics
--   dlua.transforms, dlua.vmap, dlua.einsum, dlua.arrange, dlua.csv   loaded on first use: the
--                  Jacobian family, vmap, einsum, tile/roll/flip/triu/tril, the CSV reader
-- How the engine library is found (the `dlua` program, DLUA_CORE, LUA_CPATH ...) is
-- described at the top of core.lua.
local core = require("dlua.core")
local T = require("dlua.tensor")
require("dlua.format")
require("dlua.device")   -- dl.device(name, f), dl.cuda: the CUDA plugin, loaded on first use

local dl = T.dl
dl._VERSION = "0.1.0"

-- The autograd layer extends dl and the tensor methods. It is optional only in the
-- sense that a tree without it still loads; an error inside it is not hidden.
local ok, err = pcall(require, "dlua.autograd")
if not ok then
  local msg = tostring(err)
  if not string.find(msg, "module 'dlua.autograd' not found", 1, true) then
    error(err, 0)
  end
end

-- Loaded when first used (Note [Modules loaded on first use] in core.lua): dl.vjp,
-- dl.jvp, dl.jacobian, dl.hessian, dl.checkpoint (transforms on dl.grad's engine),
-- dl.einsum, tile, roll, flip, triu, tril, repeat_interleave, split, chunk, unbind,
-- diagonal, diag, trace, outer, the NaN and infinity tests, dl.bernoulli and
-- dl.multinomial / dl.normal, index_add / index_copy / index_fill / scatter, the composed
-- pointwise functions (lerp, hypot, logaddexp ...) and statistics (nansum, var_mean, bincount,
-- histc ...), cross and cdist (dl.linalg's), tensordot, kron and the combinations,
-- PyTorch's other spellings (clamp_min,
-- movedim, new_zeros ...),
-- dl.cond / dl.while_loop, and dl.vmap.
local function loader(module) return function() require(module) end end
local ARRANGE = { "tile", "roll", "flip", "triu", "tril", "repeat_interleave", "split", "chunk", "unbind", "diagonal",
                  "diag", "trace", "outer", "fliplr", "flipud", "rot90", "unfold" }
local NONFINITE = { "isnan", "isinf", "isposinf", "isneginf", "isfinite", "nan_to_num" }
core.on_first_use(dl, { "vjp", "jvp", "jacobian", "hessian", "checkpoint" }, loader("dlua.transforms"))
core.on_first_use(dl, { "einsum" }, loader("dlua.einsum"))
core.on_first_use(dl, ARRANGE, loader("dlua.arrange"))
core.on_first_use(dl, { "tril_indices", "triu_indices", "vander" }, loader("dlua.arrange"))
core.on_first_use(T.methods, ARRANGE, loader("dlua.arrange"))
core.on_first_use(T.methods, { "repeat" }, loader("dlua.arrange"))
core.on_first_use(dl, NONFINITE, loader("dlua.nonfinite"))
core.on_first_use(T.methods, NONFINITE, loader("dlua.nonfinite"))
local ALIASES = { "clamp_min", "clamp_max", "swapaxes", "swapdims", "movedim", "moveaxis", "type_as", "new_zeros", "new_ones",
                  "new_full", "new_tensor", "uniform_", "normal_", "clip", "clip_", "absolute", "negative", "positive",
                  "ravel", "msort", "tolist", "ndimension", "new_empty", "ger", "inner", "dist", "addcmul", "addcdiv",
                  "addcmul_", "addcdiv_", "det", "inverse", "pinverse", "slogdet", "logdet", "cholesky", "qr", "svd",
                  "multiply", "subtract", "divide", "fmax", "fmin" }
core.on_first_use(T.methods, ALIASES, loader("dlua.aliases"))
core.on_first_use(T.methods, { "eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater", "greater_", "greater_equal",
                               "greater_equal_", "less", "less_", "less_equal", "less_equal_", "not_equal",
                               "not_equal_", "logical_and_", "logical_or_", "arccos", "arcsin", "arctan", "arccosh",
                               "arcsinh", "arctanh", "arctan2", "arccos_", "arcsin_", "arctan_", "arccosh_",
                               "arcsinh_", "arctanh_", "arctan2_", "multiply_", "divide_", "subtract_",
                               "true_divide_", "negative_", "absolute_", "clamp_min_", "clamp_max_", "nan_to_num_",
                               "tril_", "triu_", "cumsum_", "cumprod_", "element_size", "is_signed", "is_nonzero",
                               "is_same_size", "is_complex" }, loader("dlua.aliases"))
core.on_first_use(dl, { "greater", "greater_equal", "less", "less_equal", "not_equal", "arccos", "arcsin", "arctan",
                        "arccosh", "arcsinh", "arctanh", "arctan2", "arccos_", "arcsin_", "arctan_", "arccosh_",
                        "arcsinh_", "arctanh_", "arctan2_", "clamp_min", "clamp_max", "concatenate", "rsub",
                        "scalar_tensor", "fill", "is_nonzero" }, loader("dlua.aliases"))
core.on_first_use(T.methods, { "square_", "sinc_", "xlogy_", "sgn_", "hypot_", "copysign_", "heaviside_",
                               "float_power_", "mvlgamma_", "logit_", "frac_", "deg2rad_", "rad2deg_", "reciprocal_",
                               "trunc_", "fix_", "logical_xor_", "ldexp_" }, loader("dlua.pointwise"))
core.on_first_use(T.methods, { "split_with_sizes", "sum_to_size", "fill_diagonal_" }, loader("dlua.shaping"))
core.on_first_use(dl, { "movedim", "moveaxis", "swapaxes", "swapdims", "clip", "absolute", "negative", "positive", "ravel",
                        "msort", "ger", "inner", "addcmul", "addcdiv", "logdet", "gather", "index_select", "narrow",
                        "select", "permute", "flatten", "squeeze", "unsqueeze", "transpose", "reshape", "t",
                        "multiply", "subtract", "divide", "fmax", "fmin" },
                  loader("dlua.aliases"))
local INDEXED = { "index_add", "index_copy", "index_fill", "scatter", "scatter_reduce", "index_put", "put",
                  "masked_scatter", "take" }
core.on_first_use(dl, INDEXED, loader("dlua.indexed"))
core.on_first_use(T.methods, INDEXED, loader("dlua.indexed"))
core.on_first_use(dl, { "scatter_add" }, loader("dlua.indexed"))   -- (the method is the engine's)
core.on_first_use(T.methods, { "index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_add_",
                               "scatter_reduce_", "index_put_", "put_", "masked_scatter_" }, loader("dlua.indexed"))
core.on_first_use(dl, { "bernoulli", "multinomial", "normal" }, loader("dlua.sampling"))
core.on_first_use(dl, { "tensordot", "kron", "block_diag", "cartesian_prod", "combinations", "mv", "vdot", "addmm",
                        "addmv", "baddbmm", "addbmm" }, loader("dlua.products"))
core.on_first_use(T.methods, { "mv", "vdot", "addmm", "addmv", "baddbmm", "addbmm" }, loader("dlua.products"))
local SCANS = { "cummax", "cummin", "logcumsumexp", "diff" }
core.on_first_use(dl, SCANS, loader("dlua.scans"))
core.on_first_use(T.methods, SCANS, loader("dlua.scans"))
core.on_first_use(dl, { "trapezoid", "cumulative_trapezoid" }, loader("dlua.scans"))
local SHAPING = { "broadcast_to", "take_along_dim", "tensor_split", "atleast_1d", "atleast_2d", "atleast_3d",
                  "diag_embed", "diagflat", "unflatten", "hsplit", "vsplit", "dsplit" }
core.on_first_use(dl, SHAPING, loader("dlua.shaping"))
core.on_first_use(T.methods, SHAPING, loader("dlua.shaping"))
core.on_first_use(dl, { "broadcast_shapes", "broadcast_tensors", "hstack", "vstack", "row_stack", "dstack",
                            "column_stack" },
                  loader("dlua.shaping"))
core.on_first_use(T.methods, { "t_", "transpose_", "swapaxes_", "swapdims_", "squeeze_", "unsqueeze_", "set_", "resize_",
                               "resize_as_" }, loader("dlua.shaping"))
core.on_first_use(dl, { "matrix_power", "matrix_exp" }, loader("dlua.linalg"))
core.on_first_use(T.methods, { "matrix_power", "matrix_exp" }, loader("dlua.linalg"))
local POINTWISE = { "lerp", "hypot", "logaddexp", "trunc", "frac", "reciprocal", "square", "isclose",
                    "logical_xor", "true_divide", "xlogy", "logit", "sinc", "deg2rad", "rad2deg", "sgn",
                    "signbit", "copysign", "heaviside", "float_power", "mvlgamma", "logaddexp2", "ldexp", "frexp",
                    "nextafter", "fix" }
core.on_first_use(dl, POINTWISE, loader("dlua.pointwise"))
core.on_first_use(T.methods, POINTWISE, loader("dlua.pointwise"))
core.on_first_use(T.methods, { "lerp_" }, loader("dlua.pointwise"))
core.on_first_use(dl, { "nansum", "nanmean", "var_mean", "std_mean", "aminmax", "bincount", "histc", "cov", "corrcoef",
                        "quantile", "nanquantile", "renorm" }, loader("dlua.statistics"))
core.on_first_use(T.methods, { "nansum", "nanmean", "var_mean", "std_mean", "aminmax", "cov", "corrcoef", "quantile",
                               "nanquantile", "renorm" },
                  loader("dlua.statistics"))
core.on_first_use(dl, { "cross", "cdist" }, loader("dlua.linalg"))
core.on_first_use(T.methods, { "bernoulli", "multinomial" }, loader("dlua.sampling"))
core.on_first_use(dl, { "cond", "while_loop" }, loader("dlua.control"))
core.on_first_use(dl, { "result_type", "promote_types", "can_cast", "finfo", "iinfo" }, loader("dlua.dtypes"))
core.on_first_use(dl, { "vmap" }, loader("dlua.vmap"))
local SORTING = { "sort", "argsort", "topk", "kthvalue", "median", "nanmedian", "nonzero", "argwhere", "count_nonzero",
                  "masked_select", "unique", "unique_consecutive", "mode", "isin" }
core.on_first_use(dl, SORTING, loader("dlua.sorting"))
core.on_first_use(T.methods, SORTING, loader("dlua.sorting"))
core.on_first_use(dl, { "searchsorted", "bucketize" }, loader("dlua.sorting"))
local SIGNAL = { "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window", "stft",
                 "istft" }
core.on_first_use(dl, SIGNAL, loader("dlua.signal"))
core.on_first_use(T.methods, { "stft", "istft" }, loader("dlua.signal"))
local SOLVES = { "cholesky_solve", "cholesky_inverse", "triangular_solve" }
core.on_first_use(dl, SOLVES, loader("dlua.linalg"))
core.on_first_use(T.methods, SOLVES, loader("dlua.linalg"))
core.on_first_use(dl, { "pdist", "bilinear" }, loader("dlua.linalg"))
local VIEW_SCATTERS = { "select_scatter", "slice_scatter", "diagonal_scatter", "index_reduce" }
core.on_first_use(dl, VIEW_SCATTERS, loader("dlua.indexed"))
core.on_first_use(T.methods, VIEW_SCATTERS, loader("dlua.indexed"))
core.on_first_use(T.methods, { "index_reduce_" }, loader("dlua.indexed"))
core.on_first_use(dl, { "poisson", "binomial" }, loader("dlua.sampling"))
core.on_first_use(T.methods, { "random_", "exponential_", "geometric_", "cauchy_", "log_normal_", "bernoulli_" },
                  loader("dlua.sampling"))

-- dl.linalg: decompositions, solves, norms (torch.linalg's names). Its module loads when
-- the table is first read.
dl.linalg = setmetatable({}, {
  __index = function(self, k) require("dlua.linalg"); return rawget(self, k) end,
})

-- A table whose module loads (and fills it) when the table is first read.
local function loaded_on_first_read(module)
  return setmetatable({}, {
    __index = function(self, k)
      setmetatable(self, nil)
      require(module)
      return rawget(self, k)
    end,
  })
end
-- dl.special: torch.special's functions; dl.distributions: torch.distributions'.
dl.special = loaded_on_first_read("dlua.special")
dl.distributions = loaded_on_first_read("dlua.distributions")
-- dl.fft: torch.fft's transforms, complex values as (real, imaginary) pairs.
dl.fft = loaded_on_first_read("dlua.fft")

-- dl.compile: deferred, traced and fused calls of a Lua function.
require("dlua.compile")

-- dl.export(f, args, opts) and dl.export.load(path): graphs in files, run without Lua.
-- Its module loads when the table is first called or read (it replaces this metatable).
dl.export = setmetatable({}, {
  __call = function(self, ...) require("dlua.export"); return self(...) end,
  __index = function(self, k) require("dlua.export"); return rawget(self, k) end,
})

-- Files (dl.save/dl.load, dl.data.load_idx/fashion_mnist), checkpoints, TensorBoard
-- summaries and progress bars; after autograd, whose no_grad they use.
require("dlua.io")
require("dlua.checkpoint")
require("dlua.summary")
require("dlua.progress")

-- Training: models, optimizers, input pipelines, metrics (they use autograd).
require("dlua.nn")
require("dlua.optim")
require("dlua.data")
core.on_first_use(dl.data, { "read_csv", "from_csv" }, loader("dlua.csv"))
-- dl.image (load, save, decode, encode) and dl.data.images: image files through stb.
dl.image = setmetatable({}, {
  __index = function(self, k) require("dlua.image"); return rawget(self, k) end,
})
core.on_first_use(dl.data, { "images" }, loader("dlua.image"))
require("dlua.metrics")

-- dl.dist: data-parallel training over MPI (its plugin loads only under mpirun). Its
-- module loads when the table is first read: a script that does not use it keeps it out
-- of the Lua heap, whose size every full collection's time follows (Note [Stepping the
-- collector] in lifetime.lua).
dl.dist = setmetatable({}, {
  __index = function(self, k) require("dlua.dist"); return rawget(self, k) end,
})

return dl
