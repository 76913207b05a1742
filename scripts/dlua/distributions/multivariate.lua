-- dlua.distributions.multivariate: MultivariateNormal, LowRankMultivariateNormal, Wishart,
-- LKJCholesky and Independent.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str, dl = T.is_tensor, T.shape_str, T.dl
local type, pairs, setmetatable, getmetatable, tostring = type, pairs, setmetatable, getmetatable, tostring
local class, parameters = B.class, B.parameters
local require_all, concat, with_properties = B.require_all, B.concat, B.with_properties
local LOG_SQRT_2PI = B.LOG_SQRT_2PI
local half_log_det, sum_last = B.half_log_det, B.sum_last
local D = B.D
local C, support = B.C, B.support

-- ---- multivariate -------------------------------------------------------------------------------

-- The lower Cholesky factor L of the covariance given in spec as exactly one of
-- covariance_matrix, scale_tril or precision_matrix (..., k, k), checked (k: the size
-- expected, or nil: any square matrix); and whether to validate.
local function scale_tril_of(op, spec, k, what)
  if type(spec) ~= "table" or is_tensor(spec) then
    raise(op .. ": expected {covariance_matrix =}, {scale_tril =} or {precision_matrix =} after " .. what)
  end
  local given = 0
  for key in pairs(spec) do
    if key == "covariance_matrix" or key == "scale_tril" or key == "precision_matrix" then given = given + 1
    elseif key ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(key) .. "'") end
  end
  if given ~= 1 then raise(op .. ": give exactly one of covariance_matrix, scale_tril and precision_matrix") end
  local m = spec.covariance_matrix or spec.scale_tril or spec.precision_matrix
  m = parameters(op, { "the matrix" }, { m })[1]
  k = k or (m:dim() >= 2 and m:size(-1) or 0)
  if m:dim() < 2 or m:size(-1) ~= k or m:size(-2) ~= k or k == 0 then
    raise(op .. ": expected a (..., " .. k .. ", " .. k .. ") matrix for " .. what .. ", got shape " .. shape_str(m.shape))
  end
  local validate = spec.validate_args ~= false
  if validate then
    if spec.scale_tril then
      require_all(op, m:tril():eq(m), "scale_tril must be lower triangular")
    else
      require_all(op, (m - m:transpose(-1, -2)):abs():le(m:abs():amax({ -2, -1 }, true) * 1e-6),
                  (spec.covariance_matrix and "covariance_matrix" or "precision_matrix") .. " must be symmetric")
    end
  end
  local L
  local ok, err = pcall(function()
    if spec.scale_tril then L = m:tril()
    elseif spec.covariance_matrix then L = dl.linalg.cholesky(m)
    else L = dl.linalg.cholesky(dl.linalg.inv(m)) end
  end)
  if not ok then raise(op .. ": the matrix is not positive definite (" .. tostring(err):gsub("^.-: ", "") .. ")") end
  if validate and spec.scale_tril then
    require_all(op, L:diagonal(0, -2, -1):gt(0), "scale_tril must have a positive diagonal")
  end
  return L, validate
end

-- MultivariateNormal(loc, {covariance_matrix = S | scale_tril = L | precision_matrix = P}):
-- the Gaussian of mean loc (..., k), through the lower Cholesky factor L of its covariance.
local MultivariateNormal = class("MultivariateNormal")
MultivariateNormal._params = { "loc" }
function MultivariateNormal.new(loc, spec, ...)
  local op = "MultivariateNormal"
  if select("#", ...) > 0 then raise(op .. ": expected loc and one options table") end
  loc = parameters(op, { "loc" }, { loc })[1]
  if loc:dim() < 1 then raise(op .. ": loc must have at least one dim (the event)") end
  local k = loc:size(-1)
  local L = scale_tril_of(op, spec, k, "loc of shape " .. shape_str(loc.shape))
  local lb, Lb = loc.shape, L.shape
  lb[#lb] = nil
  Lb[#Lb] = nil
  Lb[#Lb] = nil
  local batch = dl.broadcast_shapes(lb, Lb)
  return setmetatable({ loc = loc:expand(concat(batch, { k })), scale_tril = L:expand(concat(batch, { k, k })),
                        batch_shape = batch, event_shape = { k }, _like = loc, _validate = spec.validate_args ~= false },
                      MultivariateNormal)
end
function MultivariateNormal:_get_mean() return self.loc end
function MultivariateNormal:_get_covariance_matrix() return self.scale_tril:matmul(self.scale_tril:transpose(-2, -1)) end
function MultivariateNormal:_get_variance() return self.scale_tril:pow(2):sum(-1) end
function MultivariateNormal:rsample(shape)
  local eps = dl.randn(self:_extended(shape), { dtype = self.loc.dtype, device = self.loc.device })
  return self.loc + self.scale_tril:matmul(eps:unsqueeze(-1)):squeeze(-1)
end
function MultivariateNormal:log_prob(v)
  v = self:_value("log_prob", v)
  local diff = v - self.loc
  local L = self.scale_tril
  local k = self.event_shape[1]
  local batch = diff.shape
  batch[#batch] = nil
  local z = dl.linalg.solve_triangular(L:expand(concat(batch, { k, k })), diff:unsqueeze(-1), { upper = false })
    :squeeze(-1)
  return (z * z):sum(-1) * -0.5 - half_log_det(L) - k * LOG_SQRT_2PI
end
function MultivariateNormal:entropy()
  local k = self.event_shape[1]
  return half_log_det(self.scale_tril) + k * (0.5 + LOG_SQRT_2PI)
end
function MultivariateNormal:_get_mode() return self.loc end
support(MultivariateNormal, C.real_vector)
MultivariateNormal.has_rsample = true
with_properties(MultivariateNormal)

-- LowRankMultivariateNormal(loc, cov_factor W (..., n, r), cov_diag D (..., n)): the
-- Gaussian of covariance W W^T + diag(D), r << n, without forming it: through the
-- capacitance C = I + W^T D^-1 W (r x r), log det = log det C + sum log D and the
-- Mahalanobis term by Woodbury; draws loc + W e_r + sqrt(D) e_n.
local LowRank = class("LowRankMultivariateNormal")
LowRank._params = { "loc" }
function LowRank.new(loc, cov_factor, cov_diag, ...)
  local op = "LowRankMultivariateNormal"
  local validate, n_args = B.take_options(op, { cov_factor, cov_diag, ... }, 2 + select("#", ...))
  if n_args ~= 2 then raise(op .. ": expected loc, cov_factor and cov_diag") end
  -- (each alone: their shapes are not broadcast against each other)
  loc = parameters(op, { "loc" }, { loc })[1]
  cov_factor = parameters(op, { "cov_factor" }, { cov_factor })[1]:to(loc.dtype)
  cov_diag = parameters(op, { "cov_diag" }, { cov_diag })[1]:to(loc.dtype)
  if loc:dim() < 1 then raise(op .. ": loc must have at least one dim (the event)") end
  local n = loc:size(-1)
  if cov_factor:dim() < 2 or cov_factor:size(-2) ~= n then
    raise(op .. ": cov_factor must be (..., " .. n .. ", rank) for loc of shape " .. shape_str(loc.shape)
          .. ", got shape " .. shape_str(cov_factor.shape))
  end
  if cov_diag:dim() < 1 or cov_diag:size(-1) ~= n then
    raise(op .. ": cov_diag must be (..., " .. n .. ") for loc of shape " .. shape_str(loc.shape)
          .. ", got shape " .. shape_str(cov_diag.shape))
  end
  if validate then require_all(op, cov_diag:gt(0), "cov_diag must be positive") end
  local r = cov_factor:size(-1)
  local lb, wb, db = loc.shape, cov_factor.shape, cov_diag.shape
  lb[#lb], db[#db], wb[#wb], wb[#wb - 1] = nil, nil, nil, nil
  local batch = dl.broadcast_shapes(lb, wb, db)
  local self = setmetatable({ loc = loc:expand(concat(batch, { n })), cov_factor = cov_factor:expand(concat(batch, { n, r })),
                              cov_diag = cov_diag:expand(concat(batch, { n })), batch_shape = batch, event_shape = { n },
                              _like = loc, _validate = validate }, LowRank)
  -- the capacitance's Cholesky factor, once
  local wt_dinv = self.cov_factor:transpose(-1, -2) / self.cov_diag:unsqueeze(-2)
  local cap = wt_dinv:matmul(self.cov_factor) + dl.eye(r, { dtype = loc.dtype, device = loc.device })
  self._cap_tril = dl.linalg.cholesky(cap)
  return self
end
function LowRank:_get_mean() return self.loc end
function LowRank:_get_variance() return self.cov_factor:pow(2):sum(-1) + self.cov_diag end
function LowRank:_get_covariance_matrix()
  return self.cov_factor:matmul(self.cov_factor:transpose(-1, -2)) + dl.diag_embed(self.cov_diag)
end
function LowRank:rsample(shape)
  local o = { dtype = self.loc.dtype, device = self.loc.device }
  local ext = self:_extended(shape)
  local er = concat(ext, {})
  er[#er] = self.cov_factor:size(-1)   -- (a draw of rank r for each of n)
  local w = dl.randn(er, o)
  local e = dl.randn(ext, o)
  return self.loc + self.cov_factor:matmul(w:unsqueeze(-1)):squeeze(-1) + self.cov_diag:sqrt() * e
end
-- log det (W W^T + D) = 2 sum log diag(chol(C)) + sum log D
local function low_rank_log_det(self) return half_log_det(self._cap_tril) * 2 + self.cov_diag:log():sum(-1) end
function LowRank:log_prob(v)
  v = self:_value("log_prob", v)
  local diff = v - self.loc
  local n = self.event_shape[1]
  -- x^T S^-1 x = x^T D^-1 x - |L^-1 W^T D^-1 x|^2, L the capacitance's factor
  local dinv_x = diff / self.cov_diag
  local wt = self.cov_factor:transpose(-1, -2)
  local u = wt:matmul(dinv_x:unsqueeze(-1))
  local batch = u.shape
  batch[#batch], batch[#batch - 1] = nil, nil
  local r = self.cov_factor:size(-1)
  local z = dl.linalg.solve_triangular(self._cap_tril:expand(concat(batch, { r, r })), u, { upper = false }):squeeze(-1)
  local m = (diff * dinv_x):sum(-1) - (z * z):sum(-1)
  return m * -0.5 - low_rank_log_det(self) * 0.5 - n * LOG_SQRT_2PI
end
function LowRank:entropy()
  local n = self.event_shape[1]
  return low_rank_log_det(self) * 0.5 + n * (0.5 + LOG_SQRT_2PI)
end
function LowRank:_get_mode() return self.loc end
support(LowRank, C.real_vector)
LowRank.has_rsample = true
with_properties(LowRank)

-- Wishart(df, {covariance_matrix = S | scale_tril = L | precision_matrix = P}): the
-- distribution on positive definite (p, p) matrices of the sum of df outer products of
-- N(0, S) draws, for any real df > p - 1. Draws by Bartlett's decomposition, X = L A A^T
-- L^T with A lower triangular, A_ii^2 ~ Chi2(df - i + 1) and N(0, 1) below the diagonal:
-- differentiable in df and the matrix.
-- log_prob's value as (..., p, p) matrices for an event of shape {p, p}.
local function matrix_value(self, op, v)
  v = self:_value("log_prob", v)
  local p = self.event_shape[1]
  if v:dim() < 2 or v:size(-1) ~= p or v:size(-2) ~= p then
    raise(op .. ": expected (..., " .. p .. ", " .. p .. ") matrices, got shape " .. shape_str(v.shape))
  end
  return v
end

local Wishart = class("Wishart")
Wishart._params = { "df" }
function Wishart.new(df, spec, ...)
  local op = "Wishart"
  if select("#", ...) > 0 then raise(op .. ": expected df and one options table") end
  local L, validate = scale_tril_of(op, spec, nil, "df")
  -- (a number df takes the matrix's dtype and device, as PyTorch's)
  if type(df) == "number" then df = dl.tensor(df, { dtype = L.dtype, device = L.device }) end
  df = parameters(op, { "df" }, { df })[1]
  L = L:to(df.dtype)
  local p = L:size(-1)
  if validate then require_all(op, df:gt(p - 1), "df must be greater than p - 1 = " .. (p - 1)) end
  local Lb = L.shape
  Lb[#Lb], Lb[#Lb - 1] = nil, nil
  local batch = dl.broadcast_shapes(df.shape, Lb)
  return setmetatable({ df = df:expand(batch), scale_tril = L:expand(concat(batch, { p, p })), batch_shape = batch,
                        event_shape = { p, p }, _like = df, _validate = validate }, Wishart)
end
local function df_of(self) return self.df:unsqueeze(-1):unsqueeze(-1) end
function Wishart:_get_covariance_matrix() return self.scale_tril:matmul(self.scale_tril:transpose(-2, -1)) end
function Wishart:_get_mean() return df_of(self) * self.covariance_matrix end
-- (df - p - 1) S where df > p + 1; NaN elsewhere (no mode), as PyTorch's
function Wishart:_get_mode()
  local factor = df_of(self) - self.event_shape[1] - 1
  return dl.where(factor:gt(0), factor, 0 / 0) * self.covariance_matrix
end
-- Var X_ij = df (S_ij^2 + S_ii S_jj)
function Wishart:_get_variance()
  local S = self.covariance_matrix
  local d = S:diagonal(0, -2, -1)
  return df_of(self) * (S * S + d:unsqueeze(-1) * d:unsqueeze(-2))
end
function Wishart:rsample(shape)
  local p = self.event_shape[1]
  local o = { dtype = self.df.dtype, device = self.df.device }
  local ext = self:_extended(shape)
  -- the chi-squared degrees df, df - 1, ..., df - p + 1 of the diagonal
  local dof = self.df:unsqueeze(-1) - dl.arange(p, o)
  local diag = D.Chi2(dof, { validate_args = false }):rsample(shape):sqrt()
  local A = dl.randn(ext, o):tril(-1) + dl.diag_embed(diag)
  local LA = self.scale_tril:matmul(A)
  return LA:matmul(LA:transpose(-2, -1))
end
-- sum over i < p of digamma(x - i / 2): the derivative of mvlgamma(x, p)
local function mvdigamma(x, p)
  local shifts = dl.arange(p, { dtype = x.dtype, device = x.device }) * -0.5
  return (x:unsqueeze(-1) + shifts):digamma():sum(-1)
end
local LOG_2 = math.log(2)
-- log p(X) = (df - p - 1)/2 log|X| - tr(S^-1 X)/2 - df p/2 log 2 - df/2 log|S| - mvlgamma(df/2, p)
function Wishart:log_prob(v)
  local op = "Wishart.log_prob"
  v = matrix_value(self, op, v)
  local p = self.event_shape[1]
  if self._validate then
    require_all(op, (v - v:transpose(-1, -2)):abs():le(v:abs():amax({ -2, -1 }, true) * 1e-6), "a value is not symmetric")
    local ok = pcall(dl.linalg.cholesky, v:detach())
    if not ok then raise(op .. ": a value is not positive definite") end
  end
  local batch = v.shape
  batch[#batch], batch[#batch - 1] = nil, nil
  batch = dl.broadcast_shapes(batch, self.batch_shape)
  local L = self.scale_tril:expand(concat(batch, { p, p }))
  v = v:expand(concat(batch, { p, p }))
  -- tr(S^-1 X) = tr(L^-1 X L^-T): two triangular solves
  local y = dl.linalg.solve_triangular(L, v, { upper = false })
  local z = dl.linalg.solve_triangular(L, y:transpose(-2, -1), { upper = false })
  local nu = self.df
  local _, logdet = dl.linalg.slogdet(v)
  return -nu * (p * LOG_2 / 2 + half_log_det(self.scale_tril)) - dl.mvlgamma(nu / 2, p)
         + (nu - p - 1) / 2 * logdet - z:diagonal(0, -2, -1):sum(-1) / 2
end
function Wishart:entropy()
  local p, nu = self.event_shape[1], self.df
  return (p + 1) * (p * LOG_2 / 2 + half_log_det(self.scale_tril)) + dl.mvlgamma(nu / 2, p)
         - (nu - p - 1) / 2 * mvdigamma(nu / 2, p) + nu * p / 2
end
support(Wishart, C.positive_definite)
Wishart.has_rsample = true
with_properties(Wishart)

-- LKJCholesky(dim, concentration): the lower Cholesky factors of dim x dim correlation
-- matrices, the correlation matrix C = L L^T of density proportional to det(C)^(eta - 1)
-- (eta = concentration; 1: uniform over correlation matrices). Draws by the onion method
-- (rows as Beta-scaled directions on spheres), as PyTorch's; no mean or variance.
local LKJ = class("LKJCholesky")
LKJ._params = { "concentration" }
function LKJ.new(dim, concentration, ...)
  local op = "LKJCholesky"
  local validate, n = B.take_options(op, { concentration, ... }, 1 + select("#", ...))
  if n > 1 then raise(op .. ": expected dim and a concentration") end
  if not core.integer(dim) or dim < 2 then raise(op .. ": dim must be a whole number >= 2, got " .. tostring(dim)) end
  if n == 0 or concentration == nil then concentration = 1 end
  concentration = parameters(op, { "concentration" }, { concentration })[1]
  if validate then require_all(op, concentration:gt(0), "concentration must be positive") end
  local self = setmetatable({ dim = dim, concentration = concentration, batch_shape = concentration.shape,
                              event_shape = { dim, dim }, _like = concentration, _validate = validate }, LKJ)
  -- the onion's Beta: row i (1-based) draws its squared off-diagonal length from
  -- Beta((i - 1) / 2, eta + (dim - i) / 2) (row 1 has none)
  local o = { dtype = concentration.dtype, device = concentration.device }
  local offset = dl.cat({ dl.zeros(1, o), dl.arange(dim - 1, o) })
  local marginal = concentration + 0.5 * (dim - 2)
  self._beta = D.Beta(offset + 0.5, marginal:unsqueeze(-1) - offset * 0.5, { validate_args = false })
  return self
end
function LKJ:sample(shape)
  return dl.no_grad(function()
    local y = self._beta:sample(shape):unsqueeze(-1)
    local ext = self:_extended(shape)
    local normal = dl.randn(ext, { dtype = self.concentration.dtype, device = self.concentration.device }):tril(-1)
    local norm = normal:norm(-1, true)
    local direction = dl.where(norm:gt(0), normal / dl.where(norm:gt(0), norm, 1), 0)   -- (row 1: zeros)
    local w = y:sqrt() * direction
    local diag = (1 - (w * w):sum(-1)):clamp(B.tiny_of(w), nil):sqrt()
    return w + dl.diag_embed(diag)
  end)
end
-- log p(L) = sum_(i=2..dim) (dim - i + 2 (eta - 1)) log L_ii - log of the normaliser
function LKJ:log_prob(v)
  local op = "LKJCholesky.log_prob"
  local dim = self.dim
  v = matrix_value(self, op, v)
  if self._validate then
    require_all(op, v:tril():eq(v):logical_and(v:diagonal(0, -2, -1):gt(0):unsqueeze(-1)),
                "a value is not lower triangular with a positive diagonal")
    require_all(op, ((v * v):sum(-1) - 1):abs():le(1e-6), "a value's rows do not have length 1 (not a correlation's factor)")
  end
  local o = { dtype = self.concentration.dtype, device = self.concentration.device }
  local diag = v:diagonal(0, -2, -1):narrow(-1, 2, dim - 1)
  local order = (self.concentration - 1):unsqueeze(-1) * 2 + dim - dl.arange(2, dim + 1, o)
  local unnormalised = (order * diag:log()):sum(-1)
  local dm1 = dim - 1
  local alpha = self.concentration + 0.5 * dm1
  local normaliser = 0.5 * dm1 * math.log(math.pi) + dl.mvlgamma(alpha - 0.5, dm1) - alpha:lgamma() * dm1
  return unnormalised - normaliser
end
support(LKJ, C.corr_cholesky)
with_properties(LKJ)

-- Independent(base, n): base's last n batch dims taken as one event (log_prob and entropy
-- summed over them), as a diagonal Gaussian over pixels is Independent(Normal(mu, sigma), 3).
local Independent = class("Independent")
function Independent.new(base, n)
  local op = "Independent"
  if type(base) ~= "table" or getmetatable(base) == nil or base.log_prob == nil then
    bad_arg(op, "a distribution", base)
  end
  if type(n) ~= "number" or n ~= math.floor(n) or n < 0 or n > #base.batch_shape then
    raise(op .. ": n must be an integer from 0 to " .. #base.batch_shape .. " (the base's batch dims), got " .. tostring(n))
  end
  local nb = #base.batch_shape - n
  local batch, moved = {}, {}
  for i = 1, nb do batch[i] = base.batch_shape[i] end
  for i = nb + 1, #base.batch_shape do moved[#moved + 1] = base.batch_shape[i] end
  return setmetatable({ base_dist = base, reinterpreted_batch_ndims = n, batch_shape = batch,
                        event_shape = concat(moved, base.event_shape), _like = base._like,
                        has_rsample = base.has_rsample, has_enumerate_support = n == 0 and base.has_enumerate_support },
                      Independent)
end
function Independent:__repr()
  return "Independent(" .. tostring(self.base_dist) .. ", " .. self.reinterpreted_batch_ndims .. ")"
end
function Independent:_get_mean() return self.base_dist.mean end
function Independent:_get_variance() return self.base_dist.variance end
function Independent:rsample(shape) return self.base_dist:rsample(shape) end
function Independent:sample(shape) return self.base_dist:sample(shape) end
function Independent:log_prob(v) return sum_last(self.base_dist:log_prob(v), self.reinterpreted_batch_ndims) end
function Independent:entropy() return sum_last(self.base_dist:entropy(), self.reinterpreted_batch_ndims) end
function Independent:_get_mode() return self.base_dist.mode end
support(Independent, function(self) return C.independent(self.base_dist.support, self.reinterpreted_batch_ndims) end)
-- (the base's values, where no batch dim is taken into the event, as PyTorch's)
function Independent:enumerate_support(opts)
  if self.reinterpreted_batch_ndims > 0 then
    raise("Independent.enumerate_support: not defined where batch dims are taken into the event (n = "
          .. self.reinterpreted_batch_ndims .. ")")
  end
  return self.base_dist:enumerate_support(opts)
end
with_properties(Independent)
