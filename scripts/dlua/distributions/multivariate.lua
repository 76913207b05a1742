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
