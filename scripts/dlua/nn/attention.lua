-- dlua.nn.attention: scaled dot-product attention, nn.MultiheadAttention, the
-- transformer layers (TransformerEncoderLayer, TransformerDecoderLayer), their stacks and
-- nn.Transformer, as PyTorch's (the same shapes, masks, parameter names and
-- initialisation, so that a state dict moves between the two).
--
--   local y = F.scaled_dot_product_attention(q, k, v, {causal = true})
--   local mha = dl.nn.MultiheadAttention(64, 4, {batch_first = true})
--   local out, weights = mha(x, x, x)
--
-- The attention is composed of the engine's ops (a batched matmul, the engine's softmax,
-- which subtracts each row's maximum first, and a second matmul): logits of 1e4 give
-- exact weights, not NaN. It is not one fused kernel: the (L, S) scores are made.
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F = require("dlua.nn.functional")
local L = require("dlua.nn.layers")
local init = require("dlua.nn.initializers")
core.own_source()

local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, tostring, sqrt, huge = type, tostring, math.sqrt, math.huge
local fmt = Module.format_args
local int_arg, param = L.int_arg, L.param

local A = {}

local function check_tensor(op, x)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
end

-- A mask as scores to add: a float mask as it is, a bool mask as 0 where `keep` and
-- -inf elsewhere (keep = true: True marks what takes part, PyTorch's
-- scaled_dot_product_attention; false: True marks what is masked out, its
-- MultiheadAttention's).
local function additive(op, mask, dtype, keep)
  check_tensor(op, mask)
  if mask.dtype == "bool" then
    local z = dl.zeros(mask.shape, { dtype = dtype, device = mask.device })
    local ninf = dl.full(mask.shape, -huge, { dtype = dtype, device = mask.device })
    if keep then return dl.where(mask, z, ninf) end
    return dl.where(mask, ninf, z)
  end
  if not mask:is_floating_point() then
    raise(op .. ": a mask must be bool or float, got " .. mask.dtype)
  end
  return mask:to(dtype)
end

-- (L, S) with -inf above the diagonal: position i attends to positions <= i.
local function causal_mask(Lq, S, dtype, device)
  local i = dl.arange(1, Lq + 1, { dtype = "int64", device = device }):reshape(Lq, 1)
  local j = dl.arange(1, S + 1, { dtype = "int64", device = device }):reshape(1, S)
  return additive("scaled_dot_product_attention", j:gt(i), dtype, false)
end

-- F.scaled_dot_product_attention(q, k, v [, opts]): softmax(q k^T scale + mask) v for q
-- (..., L, E), k (..., S, E), v (..., S, Ev); opts.mask (bool: True takes part, or
-- float: added; broadcast against (..., L, S)), opts.causal, opts.scale (1 / sqrt(E)),
-- opts.dropout_p (on the weights). Returns (..., L, Ev) and the weights.
local SDPA = { mask = true, causal = true, scale = true, dropout_p = true }
function F.scaled_dot_product_attention(q, k, v, opts)
  local op = "scaled_dot_product_attention"
  check_tensor(op, q)
  check_tensor(op, k)
  check_tensor(op, v)
  opts = options(op, opts, SDPA)
  if q:dim() < 2 or k:dim() ~= q:dim() or v:dim() ~= q:dim() then
    raise(op .. ": expected q, k, v of one rank >= 2, got shapes " .. shape_str(q.shape) .. ", "
          .. shape_str(k.shape) .. " and " .. shape_str(v.shape))
  end
  local E, Lq, S = q:size(-1), q:size(-2), k:size(-2)
  if k:size(-1) ~= E or v:size(-2) ~= S then
    raise(op .. ": q (..., L, E), k (..., S, E) and v (..., S, Ev) do not match: " .. shape_str(q.shape) .. ", "
          .. shape_str(k.shape) .. ", " .. shape_str(v.shape))
  end
  local scale = opts.scale or 1 / sqrt(E)
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  if opts.causal then scores = scores + causal_mask(Lq, S, scores.dtype, q.device) end
  if opts.mask ~= nil then
    local mask = opts.mask
    check_tensor(op, mask)
    local ms, ss = mask.shape, scores.shape
    for i = 1, math.min(#ms, #ss) do
      local a, b = ms[#ms - i + 1], ss[#ss - i + 1]
      if a ~= b and a ~= 1 and b ~= 1 then
        raise(op .. ": expected a mask that broadcasts against the scores' shape " .. shape_str(ss)
              .. " (..., L, S), got shape " .. shape_str(ms))
      end
    end
    scores = scores + additive(op, mask, scores.dtype, true)
  end
  local w = dl.softmax(scores, -1)
  local p = opts.dropout_p or 0
  if p > 0 then w = F.dropout(w, p, true) end
  return w:matmul(v), w
end

-- F.sinusoidal_positions(length, dim [, {base = 10000, dtype}]): the (length, dim)
-- position encodings of "Attention Is All You Need": sin(p / base^(2i/dim)) in the even
-- columns, cos in the odd ones (positions p from 0), to add to token embeddings.
function F.sinusoidal_positions(length, dim, opts)
  local op = "sinusoidal_positions"
  opts = options(op, opts, { base = true, dtype = true })
  int_arg(op, length, "length")
  int_arg(op, dim, "dim")
  if dim % 2 ~= 0 then raise(op .. ": dim must be even, got " .. dim) end
  local dtype = opts.dtype or "float32"
  local pos = dl.arange(0, length, { dtype = "float64" }):reshape(length, 1)
  local i = dl.arange(0, dim / 2, { dtype = "float64" }):reshape(1, dim / 2)
  local angle = pos / dl.exp(i * (2 * math.log(opts.base or 10000) / dim))
  return dl.stack({ dl.sin(angle), dl.cos(angle) }, 3):reshape(length, dim):to(dtype)
end

-- ---- MultiheadAttention --------------------------------------------------------------------

-- MultiheadAttention(embed_dim, num_heads [, {bias, batch_first, dropout, kdim, vdim}]):
-- PyTorch's in_proj_weight (3E, E) (xavier_uniform), in_proj_bias (3E) (zeros), out_proj
-- (a Linear, bias zeros). A key of kdim features or a value of vdim (E when absent)
-- other than E takes separate q_proj_weight (E, E), k_proj_weight (E, kdim) and
-- v_proj_weight (E, vdim) instead of in_proj_weight, as PyTorch's. forward(query, key,
-- value [, {key_padding_mask, attn_mask, need_weights, average_attn_weights}]): masks as
-- PyTorch's (bool True = masked out; float added);
-- returns the output and the weights (averaged over heads unless average_attn_weights
-- is false; nil when need_weights is false).
local MHA = Module:extend("MultiheadAttention")
A.MultiheadAttention = MHA
function MHA:init(embed_dim, num_heads, opts)
  local name = "MultiheadAttention"
  opts = options(name, opts, { bias = true, batch_first = true, dropout = true, kdim = true, vdim = true })
  self.embed_dim = int_arg(name, embed_dim, "embed_dim")
  self.num_heads = int_arg(name, num_heads, "num_heads")
  self.kdim = int_arg(name, opts.kdim or embed_dim, "kdim")
  self.vdim = int_arg(name, opts.vdim or embed_dim, "vdim")
  if embed_dim % num_heads ~= 0 then
    raise(name .. ": embed_dim (" .. embed_dim .. ") must be a multiple of num_heads (" .. num_heads .. ")")
  end
  self.head_dim = embed_dim / num_heads
  self.batch_first = opts.batch_first == true
  self.dropout = opts.dropout or 0
  if self.kdim == embed_dim and self.vdim == embed_dim then
    self.in_proj_weight = param(init.xavier_uniform_(dl.empty(3 * embed_dim, embed_dim)), "in_proj_weight")
  else
    self.q_proj_weight = param(init.xavier_uniform_(dl.empty(embed_dim, embed_dim)), "q_proj_weight")
    self.k_proj_weight = param(init.xavier_uniform_(dl.empty(embed_dim, self.kdim)), "k_proj_weight")
    self.v_proj_weight = param(init.xavier_uniform_(dl.empty(embed_dim, self.vdim)), "v_proj_weight")
  end
  if opts.bias ~= false then self.in_proj_bias = param(dl.zeros(3 * embed_dim), "in_proj_bias") end
  self.out_proj = L.Linear(embed_dim, embed_dim, { bias = opts.bias ~= false })
  if self.out_proj.bias then init.zeros_(self.out_proj.bias) end
end

local MHA_FORWARD = { key_padding_mask = true, attn_mask = true, need_weights = true, average_attn_weights = true }

function MHA:forward(query, key, value, opts)
  local name = "MultiheadAttention"
  check_tensor(name, query)
  key, value = key or query, value or key or query
  check_tensor(name, key)
  check_tensor(name, value)
  opts = options(name, opts, MHA_FORWARD)
  local unbatched = query:dim() == 2
  local E, H = self.embed_dim, self.num_heads
  local hd = E / H
  local shapes = shape_str(query.shape) .. ", " .. shape_str(key.shape) .. " and " .. shape_str(value.shape)
  if (query:dim() ~= 2 and query:dim() ~= 3) or key:dim() ~= query:dim() or value:dim() ~= query:dim() then
    raise(name .. ": expected query, key and value of 3 dims (or all 2, unbatched), got shapes " .. shapes)
  end
  local function batched(t)   -- (N, L, E)
    if unbatched then return t:unsqueeze(1) end
    return self.batch_first and t or t:transpose(1, 2)
  end
  local q, k, v = batched(query), batched(key), batched(value)
  if q:size(3) ~= E or k:size(3) ~= self.kdim or v:size(3) ~= self.vdim then
    if self.kdim == E and self.vdim == E then
      raise(name .. ": expected inputs with " .. E .. " features, got shapes " .. shapes)
    end
    raise(name .. ": expected a query with " .. E .. " features, a key with " .. self.kdim .. " (kdim) and a value with "
          .. self.vdim .. " (vdim), got shapes " .. shapes)
  end
  local N, Lq, S = q:size(1), q:size(2), k:size(2)
  if k:size(1) ~= N or v:size(1) ~= N or v:size(2) ~= S then
    local layout = unbatched and "(L, E), (S, E) and (S, E)"
                   or self.batch_first and "(N, L, E), (N, S, E) and (N, S, E)" or "(L, N, E), (S, N, E) and (S, N, E)"
    raise(name .. ": expected query, key and value of shapes " .. layout .. " (one batch size, key and value "
          .. "of one length), got shapes " .. shapes)
  end
  local w, b = self.in_proj_weight, self.in_proj_bias
  local sep = { self.q_proj_weight, self.k_proj_weight, self.v_proj_weight }
  local function project(t, i, len)   -- (N, len, E (kdim, vdim)) -> (N, H, len, hd)
    local wi = w and w:narrow(1, (i - 1) * E + 1, E) or sep[i]
    local p = F.linear(t, wi, b and b:narrow(1, (i - 1) * E + 1, E) or nil)
    return p:reshape(N, len, H, hd):transpose(2, 3)
  end
  local qh, kh, vh = project(q, 1, Lq), project(k, 2, S), project(v, 3, S)
  local mask = nil
  if opts.attn_mask ~= nil then
    local am = opts.attn_mask
    check_tensor(name, am)
    local two, three = shape_str({ Lq, S }), shape_str({ unbatched and H or N * H, Lq, S })
    local got = shape_str(am.shape)
    if got ~= two and got ~= three then   -- (L, S), or (N * num_heads, L, S)
      raise(name .. ": expected attn_mask of shape " .. two .. " or " .. three .. ", got shape " .. got)
    end
    local m = additive(name, am, qh.dtype, false)
    if m:dim() == 3 then m = m:reshape(N, H, Lq, S) end   -- (N * H, L, S)
    mask = m
  end
  if opts.key_padding_mask ~= nil then
    local kp = opts.key_padding_mask
    check_tensor(name, kp)
    local want = unbatched and { S } or { N, S }
    if shape_str(kp.shape) ~= shape_str(want) then
      raise(name .. ": expected key_padding_mask of shape " .. shape_str(want) .. ", got shape " .. shape_str(kp.shape))
    end
    local m = additive(name, kp, qh.dtype, false):reshape(N, 1, 1, S)
    mask = mask and mask + m or m
  end
  local attn, weights = F.scaled_dot_product_attention(qh, kh, vh, {
    mask = mask, dropout_p = self.training and self.dropout or 0 })
  local out = self.out_proj(attn:transpose(2, 3):reshape(N, Lq, E))
  if unbatched then out = out:squeeze(1)
  elseif not self.batch_first then out = out:transpose(1, 2) end
  if opts.need_weights == false then return out, nil end
  if opts.average_attn_weights ~= false then weights = weights:mean(2) end
  if unbatched then weights = weights:squeeze(1) end
  return out, weights
end

function MHA:extra_repr()
  local E = self.embed_dim
  return fmt("", E, "", self.num_heads, "kdim", self.kdim ~= E and self.kdim or nil, "vdim",
             self.vdim ~= E and self.vdim or nil, "batch_first", self.batch_first, "dropout", self.dropout)
end

-- ---- TransformerEncoderLayer ---------------------------------------------------------------

-- TransformerEncoderLayer(d_model, nhead [, {dim_feedforward = 2048, dropout = 0.1,
-- activation = "relu" | "gelu", layer_norm_eps = 1e-5, batch_first, norm_first}]):
-- self-attention and a feed-forward block, each with a residual connection and a
-- LayerNorm (after it, or before with norm_first). forward(src [, {src_mask,
-- src_key_padding_mask, is_causal}]).
local Encoder = Module:extend("TransformerEncoderLayer")
A.TransformerEncoderLayer = Encoder
local ENCODER = { dim_feedforward = true, dropout = true, activation = true, layer_norm_eps = true,
                  batch_first = true, norm_first = true }
-- The members of an encoder layer, and with `cross` a decoder layer's (attention over
-- the memory, a third norm and dropout), in PyTorch's order.
local function layer_init(self, name, d_model, nhead, opts, cross)
  opts = options(name, opts, ENCODER)
  if type(d_model) == "number" and type(nhead) == "number" and nhead > 0 and d_model % nhead ~= 0 then
    raise(name .. ": d_model (" .. d_model .. ") must be a multiple of nhead (" .. nhead .. ")")
  end
  local ff = opts.dim_feedforward or 2048
  local p = opts.dropout == nil and 0.1 or opts.dropout
  local act = opts.activation or "relu"
  if act ~= "relu" and act ~= "gelu" then raise(name .. ": activation must be relu or gelu, got " .. tostring(act)) end
  self.activation = act
  self.norm_first = opts.norm_first == true
  self.self_attn = MHA(d_model, nhead, { batch_first = opts.batch_first, dropout = p })
  if cross then self.multihead_attn = MHA(d_model, nhead, { batch_first = opts.batch_first, dropout = p }) end
  self.linear1 = L.Linear(d_model, ff)
  self.dropout = L.Dropout(p)
  self.linear2 = L.Linear(ff, d_model)
  local eps = opts.layer_norm_eps or 1e-5
  self.norm1 = L.LayerNorm(d_model, { eps = eps })
  self.norm2 = L.LayerNorm(d_model, { eps = eps })
  if cross then self.norm3 = L.LayerNorm(d_model, { eps = eps }) end
  self.dropout1 = L.Dropout(p)
  self.dropout2 = L.Dropout(p)
  if cross then self.dropout3 = L.Dropout(p) end
end

function Encoder:init(d_model, nhead, opts)
  layer_init(self, "TransformerEncoderLayer", d_model, nhead, opts, false)
end

function Encoder:_sa(x, opts)
  local mask = opts.src_mask
  if opts.is_causal and mask == nil then
    local len = x:size(self.self_attn.batch_first and x:dim() == 3 and 2 or 1)
    mask = causal_mask(len, len, x.dtype, x.device)
  end
  local y = self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = opts.src_key_padding_mask,
                                      need_weights = false })
  return self.dropout1(y)
end

function Encoder:_ff(x)
  local h = self.linear1(x)
  h = self.activation == "gelu" and F.gelu(h) or dl.relu(h)
  return self.dropout2(self.linear2(self.dropout(h)))
end

function Encoder:forward(src, opts)
  opts = options("TransformerEncoderLayer", opts, { src_mask = true, src_key_padding_mask = true, is_causal = true })
  local x = src
  if self.norm_first then
    x = x + self:_sa(self.norm1(x), opts)
    return x + self:_ff(self.norm2(x))
  end
  x = self.norm1(x + self:_sa(x, opts))
  return self.norm2(x + self:_ff(x))
end

-- ---- TransformerDecoderLayer, the stacks, Transformer ----------------------------------------

-- TransformerDecoderLayer(d_model, nhead [, opts as the encoder layer's]): self-attention,
-- attention over the encoder's output (memory) and a feed-forward block, each with a
-- residual connection and a LayerNorm. forward(tgt, memory [, {tgt_mask, memory_mask,
-- tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal}]):
-- tgt_is_causal (memory_is_causal) without tgt_mask (memory_mask) makes the causal mask,
-- position i attending to the memory's first i (options of torch 2, not 1.13; torch 2
-- reads them as hints about the mask given, and refuses them without it).
local Decoder = Encoder:extend("TransformerDecoderLayer")   -- (its self-attention is the encoder's)
A.TransformerDecoderLayer = Decoder
function Decoder:init(d_model, nhead, opts)
  layer_init(self, "TransformerDecoderLayer", d_model, nhead, opts, true)
end

local DECODER_FORWARD = { tgt_mask = true, memory_mask = true, tgt_key_padding_mask = true,
                          memory_key_padding_mask = true, tgt_is_causal = true, memory_is_causal = true }

function Decoder:_mha(x, memory, opts)
  local mask = opts.memory_mask
  if opts.memory_is_causal and mask == nil then
    local d = self.multihead_attn.batch_first and x:dim() == 3 and 2 or 1
    mask = causal_mask(x:size(d), memory:size(d), x.dtype, x.device)
  end
  local y = self.multihead_attn(x, memory, memory, { attn_mask = mask,
                                                     key_padding_mask = opts.memory_key_padding_mask,
                                                     need_weights = false })
  return self.dropout2(y)
end

function Decoder:_ff(x)
  local h = self.linear1(x)
  h = self.activation == "gelu" and F.gelu(h) or dl.relu(h)
  return self.dropout3(self.linear2(self.dropout(h)))
end

function Decoder:forward(tgt, memory, opts)
  opts = options("TransformerDecoderLayer", opts, DECODER_FORWARD)
  check_tensor("TransformerDecoderLayer", memory)
  local sa = { src_mask = opts.tgt_mask, src_key_padding_mask = opts.tgt_key_padding_mask,
               is_causal = opts.tgt_is_causal }
  local x = tgt
  if self.norm_first then
    x = x + self:_sa(self.norm1(x), sa)
    x = x + self:_mha(self.norm2(x), memory, opts)
    return x + self:_ff(self.norm3(x))
  end
  x = self.norm1(x + self:_sa(x, sa))
  x = self.norm2(x + self:_mha(x, memory, opts))
  return self.norm3(x + self:_ff(x))
end

-- TransformerEncoder(layer, num_layers [, {norm}]) and TransformerDecoder: num_layers
-- copies of the layer (deep copies, as PyTorch's, the layer itself unused) applied in
-- turn, then the optional norm.
local function stack_init(self, name, layer, num_layers, opts)
  opts = options(name, opts, { norm = true, enable_nested_tensor = true })
  if not Module.is_module(layer) then bad_arg(name, "a layer (a module)", layer) end
  int_arg(name, num_layers, "num_layers")
  if opts.norm ~= nil and not Module.is_module(opts.norm) then bad_arg(name, "a norm module", opts.norm) end
  local layers = {}
  for i = 1, num_layers do layers[i] = layer:clone() end
  self.layers = layers   -- (before the norm: PyTorch's order of parameters)
  self.norm = opts.norm
  self.num_layers = num_layers
end

-- x through every layer (each called with x and the rest), then the norm.
local function stack_run(self, x, ...)
  for _, layer in ipairs(self.layers) do x = layer(x, ...) end
  if self.norm then x = self.norm(x) end
  return x
end

local EncoderStack = Module:extend("TransformerEncoder")
A.TransformerEncoder = EncoderStack
function EncoderStack:init(layer, num_layers, opts) stack_init(self, "TransformerEncoder", layer, num_layers, opts) end
function EncoderStack:forward(src, opts)
  opts = options("TransformerEncoder", opts, { mask = true, src_key_padding_mask = true, is_causal = true })
  return stack_run(self, src, { src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
                                is_causal = opts.is_causal })
end

local DecoderStack = Module:extend("TransformerDecoder")
A.TransformerDecoder = DecoderStack
function DecoderStack:init(layer, num_layers, opts) stack_init(self, "TransformerDecoder", layer, num_layers, opts) end
function DecoderStack:forward(tgt, memory, opts)
  return stack_run(self, tgt, memory, options("TransformerDecoder", opts, DECODER_FORWARD))
end

-- Transformer(d_model = 512, nhead = 8 [, {num_encoder_layers = 6, num_decoder_layers = 6,
-- dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first}]):
-- PyTorch's encoder-decoder, each stack ending in a LayerNorm, every matrix parameter
-- initialised xavier_uniform_ as PyTorch's. forward(src, tgt [, {src_mask, tgt_mask,
-- memory_mask, src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask}]).
local Transformer = Module:extend("Transformer")
A.Transformer = Transformer
function Transformer:init(d_model, nhead, opts)
  local name = "Transformer"
  opts = options(name, opts, { num_encoder_layers = true, num_decoder_layers = true, dim_feedforward = true,
                               dropout = true, activation = true, layer_norm_eps = true, batch_first = true,
                               norm_first = true })
  d_model, nhead = d_model or 512, nhead or 8
  if type(d_model) == "number" and type(nhead) == "number" and nhead > 0 and d_model % nhead ~= 0 then
    raise(name .. ": d_model (" .. d_model .. ") must be a multiple of nhead (" .. nhead .. ")")
  end
  local layer_opts = { dim_feedforward = opts.dim_feedforward, dropout = opts.dropout, activation = opts.activation,
                       layer_norm_eps = opts.layer_norm_eps, batch_first = opts.batch_first,
                       norm_first = opts.norm_first }
  local eps = opts.layer_norm_eps or 1e-5
  self.encoder = EncoderStack(Encoder(d_model, nhead, layer_opts), opts.num_encoder_layers or 6,
                              { norm = L.LayerNorm(d_model, { eps = eps }) })
  self.decoder = DecoderStack(Decoder(d_model, nhead, layer_opts), opts.num_decoder_layers or 6,
                              { norm = L.LayerNorm(d_model, { eps = eps }) })
  self.d_model, self.nhead, self.batch_first = d_model, nhead, opts.batch_first == true
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then dl.no_grad(function() init.xavier_uniform_(p) end) end
  end
end
function Transformer:forward(src, tgt, opts)
  opts = options("Transformer", opts, { src_mask = true, tgt_mask = true, memory_mask = true, src_key_padding_mask = true,
                                        tgt_key_padding_mask = true, memory_key_padding_mask = true })
  local memory = self.encoder(src, { mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask })
  return self.decoder(tgt, memory, { tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
                                     tgt_key_padding_mask = opts.tgt_key_padding_mask,
                                     memory_key_padding_mask = opts.memory_key_padding_mask })
end

-- The (n, n) additive mask that keeps each position from attending to later ones: 0 on
-- and below the diagonal, -inf above (PyTorch's generate_square_subsequent_mask).
function Transformer.generate_square_subsequent_mask(n, opts)
  int_arg("generate_square_subsequent_mask", n, "size")
  local o = opts or {}
  return causal_mask(n, n, o.dtype or "float32", o.device or "cpu")
end

return A
