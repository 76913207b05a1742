-- dlua.distributions.multivariate: MultivariateNormal and Independent.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str, dl = T.is_tensor, T.shape_str, T.dl
local type, setmetatable, getmetatable, tostring = type, setmetatable, getmetatable, tostring
local class, parameters = B.class, B.parameters
local require_all, concat, with_properties = B.require_all, B.concat, B.with_properties
local LOG_SQRT_2PI = B.LOG_SQRT_2PI
local half_log_det, sum_last = B.half_log_det, B.sum_last

-- ---- multivariate -------------------------------------------------------------------------------

-- MultivariateNormal(loc, {covariance_matrix = S | scale_tril = L | precision_matrix = P}):
-- the Gaussian of mean loc (..., k), through the lower Cholesky factor L of its covariance.
local MultivariateNormal = class("MultivariateNormal")
MultivariateNormal._params = { "loc" }
function MultivariateNormal.new(loc, spec, ...)
  local op = "MultivariateNormal"
  if select("#", ...) > 0 then raise(op .. ": expected loc and one options table") end
  if type(spec) ~= "table" or is_tensor(spec) then
    raise(op .. ": expected {covariance_matrix =}, {scale_tril =} or {precision_matrix =} after loc")
  end
  local given = 0
  for k in pairs(spec) do
    if k == "covariance_matrix" or k == "scale_tril" or k == "precision_matrix" then given = given + 1
    elseif k ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
  end
  if given ~= 1 then raise(op .. ": give exactly one of covariance_matrix, scale_tril and precision_matrix") end
  loc = parameters(op, { "loc" }, { loc })[1]
  if loc:dim() < 1 then raise(op .. ": loc must have at least one dim (the event)") end
  local k = loc:size(-1)
  local m = spec.covariance_matrix or spec.scale_tril or spec.precision_matrix
  m = parameters(op, { "the matrix" }, { m })[1]
  if m:dim() < 2 or m:size(-1) ~= k or m:size(-2) ~= k then
    raise(op .. ": expected a (..., " .. k .. ", " .. k .. ") matrix for loc of shape " .. shape_str(loc.shape)
          .. ", got shape " .. shape_str(m.shape))
  end
  if spec.validate_args ~= false then
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
  if spec.validate_args ~= false and spec.scale_tril then
    require_all(op, L:diagonal(0, -2, -1):gt(0), "scale_tril must have a positive diagonal")
  end
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
with_properties(LowRank)

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
                        event_shape = concat(moved, base.event_shape), _like = base._like }, Independent)
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
with_properties(Independent)
