-- dlua.nn: models and losses, as dl.nn (docs/training.md).
--
--   local Net = dl.nn.Module:extend("Net")
--   function Net:init() self.fc1 = dl.nn.Linear(784, 256); self.fc2 = dl.nn.Linear(256, 10) end
--   function Net:forward(x) return self.fc2(dl.relu(self.fc1(x))) end
--   local loss = dl.nn.cross_entropy(Net()(x), labels)
--
-- The pieces: dlua.nn.module (Module: tracking, state dicts, train/eval, to, printing),
-- dlua.nn.layers (Linear, Dense, Conv2d, pools, BatchNorm, Embedding ...),
-- dlua.nn.recurrent (the RNN, LSTM and GRU cells and layers), dlua.nn.attention
-- (scaled dot-product attention, MultiheadAttention, TransformerEncoderLayer),
-- dlua.nn.functional (stateless forms and losses, also dl.nn.functional).
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local L = require("dlua.nn.layers")
local F = require("dlua.nn.functional")

local dl = T.dl
local nn = dl.nn or {}
dl.nn = nn

nn.Module = Module
nn.is_module = Module.is_module
local function register(classes)
  for name, cls in pairs(classes) do
    if type(cls) == "table" then nn[name] = cls end
  end
end
register(L)
register(require("dlua.nn.recurrent"))
nn.functional = F

-- Loaded when first used (Note [Modules loaded on first use] in core.lua): the attention
-- layers and functions, the activations of dlua.nn.activations, the resizing of
-- dlua.nn.resample, the channel and position layers of dlua.nn.spatial, the 3-D
-- convolution and pools of dlua.nn.volumetric, the loss modules and padding layers of
-- dlua.nn.criteria, dl.nn.init, dl.nn.utils.
local function attention() register(require("dlua.nn.attention")) end
-- A module of layers and functions ({layers =, functional =}), its names in nn and F.
local function merge(module)
  return function()
    local A = require(module)
    register(A.layers)
    for name, fn in pairs(A.functional) do F[name] = fn end
  end
end
local activations, resample, spatial = merge("dlua.nn.activations"), merge("dlua.nn.resample"),
  merge("dlua.nn.spatial")
local ctc, criteria = merge("dlua.nn.ctc"), merge("dlua.nn.criteria")
local volumetric = merge("dlua.nn.volumetric")
local loads = {
  MultiheadAttention = attention,
  TransformerEncoderLayer = attention,
  TransformerDecoderLayer = attention,
  TransformerEncoder = attention,
  TransformerDecoder = attention,
  Transformer = attention,
  init = function() nn.init = require("dlua.nn.initializers") end,
  utils = function() nn.utils = require("dlua.nn.utils") end,
}
for _, name in ipairs({ "ELU", "SELU", "CELU", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "Mish", "Softsign",
                        "PReLU", "LogSigmoid", "Tanhshrink", "Softmin", "GLU", "Softshrink", "Hardshrink",
                        "Threshold", "RReLU" }) do
  loads[name] = activations
end
for _, name in ipairs({ "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "AdaptiveAvgPool1d",
                        "AdaptiveAvgPool2d", "AdaptiveAvgPool3d" }) do
  loads[name] = resample
end
loads.ctc_loss = function() ctc(); nn.ctc_loss = F.ctc_loss end
for _, name in ipairs({ "Dropout1d", "Dropout2d", "Dropout3d", "InstanceNorm1d", "InstanceNorm2d",
                        "InstanceNorm3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
                        "PixelShuffle", "PixelUnshuffle", "Unfold", "Fold", "EmbeddingBag", "Bilinear",
                        "AlphaDropout", "FeatureAlphaDropout", "LocalResponseNorm", "LPPool1d", "LPPool2d",
                        "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d" }) do
  loads[name] = spatial
end
for _, name in ipairs({ "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss",
                        "BCELoss", "BCEWithLogitsLoss", "SoftMarginLoss", "MultiLabelSoftMarginLoss", "PoissonNLLLoss",
                        "GaussianNLLLoss", "MarginRankingLoss", "CosineEmbeddingLoss", "HingeEmbeddingLoss",
                        "TripletMarginLoss", "CTCLoss", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
                        "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d",
                        "CosineSimilarity", "PairwiseDistance", "Softmax2d", "ChannelShuffle", "MultiMarginLoss",
                        "MultiLabelMarginLoss", "TripletMarginWithDistanceLoss" }) do
  loads[name] = criteria
end
for _, name in ipairs({ "Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d" }) do loads[name] = volumetric end
core.on_first_index(nn, loads)
core.on_first_use(F, { "conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d" }, volumetric)
core.on_first_use(F, { "scaled_dot_product_attention", "sinusoidal_positions" }, attention)
core.on_first_use(F, { "elu", "selu", "celu", "hardtanh", "relu6", "hardsigmoid", "hardswish", "mish", "softsign",
                       "prelu", "logsigmoid", "softmin", "glu", "softshrink", "hardshrink", "tanhshrink", "threshold",
                       "gumbel_softmax", "rrelu" }, activations)
core.on_first_use(F, { "interpolate", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
                       "affine_grid", "grid_sample" }, resample)
core.on_first_use(F, { "ctc_loss" }, ctc)
core.on_first_use(F, { "dropout1d", "dropout2d", "dropout3d", "instance_norm", "adaptive_max_pool1d",
                       "adaptive_max_pool2d", "adaptive_max_pool3d",
                       "pixel_shuffle", "pixel_unshuffle", "unfold", "fold", "embedding_bag", "bilinear",
                       "alpha_dropout", "feature_alpha_dropout", "local_response_norm", "lp_pool1d", "lp_pool2d",
                       "lp_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d" }, spatial)
core.on_first_use(F, { "multi_margin_loss", "multilabel_margin_loss", "triplet_margin_with_distance_loss", "pdist" },
                  criteria)

nn.cross_entropy = F.cross_entropy
nn.softmax_cross_entropy_with_logits = F.softmax_cross_entropy_with_logits
nn.mse_loss = F.mse_loss
nn.bce_with_logits, nn.binary_cross_entropy_with_logits = F.bce_with_logits, F.bce_with_logits
nn.one_hot = F.one_hot
nn.layer_norm, nn.group_norm = F.layer_norm, F.group_norm
T.dl.layer_norm = F.layer_norm
nn.nll_loss = F.nll_loss
nn.smooth_l1_loss = F.smooth_l1_loss
nn.huber_loss = F.huber_loss
nn.kl_div = F.kl_div
nn.cosine_embedding_loss = F.cosine_embedding_loss
nn.l1_loss, nn.binary_cross_entropy = F.l1_loss, F.binary_cross_entropy
nn.margin_ranking_loss, nn.triplet_margin_loss = F.margin_ranking_loss, F.triplet_margin_loss
nn.poisson_nll_loss, nn.gaussian_nll_loss = F.poisson_nll_loss, F.gaussian_nll_loss
nn.soft_margin_loss, nn.multilabel_soft_margin_loss = F.soft_margin_loss, F.multilabel_soft_margin_loss
nn.hinge_embedding_loss = F.hinge_embedding_loss

return nn
