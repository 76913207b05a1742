-- dlua.creation: the functions that make tensors, as dl.zeros, dl.tensor, dl.arange,
-- dl.rand ..., the random state, the default dtype and the thread count
-- (docs/tensors.md, "Making tensors"). dlua.tensor installs them into dl when it loads,
-- handing over the argument helpers they share with the ops:
--
--   require("dlua.creation")(helpers)   -- helpers: dl, wrap, parse_shape, shape_buf ...
--
-- (A module that required dlua.tensor would be loaded while dlua.tensor is still
-- loading; an installer keeps `require("dlua.tensor")` complete by itself.)
local ffi = require("ffi")
local core = require("dlua.core")
core.own_source()

return function(H)
  local C = H.C
  local dl = H.dl
  local finish = H.finish
  local shape_buf = H.shape_buf
  local parse_opts = H.parse_opts
  local new = H.new
  local int_arg = H.int_arg
  local raise = H.raise
  local parse_shape = H.parse_shape
  local wrap = H.wrap
  local typename = H.typename
  local raise_last = H.raise_last
  local bad_arg = H.bad_arg
  local retry = H.retry
  local istype = H.istype
  local fill_value = H.fill_value
  local Tensor = H.Tensor
  local BOOL, INT64 = H.BOOL, H.INT64
  local shape_str = H.shape_str
  local shape_of = H.shape_of
  local ffi_new = H.ffi_new
  local dtype_of = H.dtype_of
  local dtype_code = H.dtype_code
  local to_dtype = H.to_dtype
  local to_device = H.to_device
  local methods = H.methods
  local floor = H.floor
  local fill_shape_from = H.fill_shape_from
  local ffi_cast = H.ffi_cast
  local dtype_names = H.dtype_names
  local device_of = H.device_of
  local check_tensor = H.check_tensor
  local type, select, tostring, next = type, select, tostring, next

  local function default_dtype() return C.dl_default_dtype() end

  -- zeros, ones or full into shape_buf[0 .. nd - 1] (named so for error messages).
  local function full_(op, nd, value, code, dev)
    local id
    if op == "zeros" then id = C.dl_zeros(shape_buf, nd, code, dev)
    elseif op == "ones" then id = C.dl_ones(shape_buf, nd, code, dev)
    else id = C.dl_full(shape_buf, nd, value, code, dev) end
    if id == 0 and retry() then
      if op == "zeros" then id = C.dl_zeros(shape_buf, nd, code, dev)
      elseif op == "ones" then id = C.dl_ones(shape_buf, nd, code, dev)
      else id = C.dl_full(shape_buf, nd, value, code, dev) end
    end
    return wrap(id)
  end

  function dl.zeros(...)
    local nd, opts = parse_shape("zeros", true, ...)
    local code, dev = parse_opts("zeros", opts)
    return finish(full_("zeros", nd, 0, code or default_dtype(), dev), opts)
  end

  function dl.ones(...)
    local nd, opts = parse_shape("ones", true, ...)
    local code, dev = parse_opts("ones", opts)
    return finish(full_("ones", nd, 1, code or default_dtype(), dev), opts)
  end

  -- Uninitialised memory (as torch.empty): fast, but its values are whatever was there.
  function dl.empty(...)
    local nd, opts = parse_shape("empty", true, ...)
    local code, dev = parse_opts("empty", opts)
    code = code or default_dtype()
    local id = C.dl_empty(shape_buf, nd, code, dev)
    if id == 0 and retry() then id = C.dl_empty(shape_buf, nd, code, dev) end
    return finish(wrap(id), opts)
  end

  -- dl.full(shape, value [, opts]): shape is a table or one size. A boolean value makes
  -- a bool tensor; numbers make the default float dtype unless opts says otherwise.
  function dl.full(shape, value, opts)
    local nd = parse_shape("full", false, shape)
    if type(value) ~= "number" and type(value) ~= "boolean" then bad_arg("full", "a fill value (number or boolean)", value) end
    local code, dev = parse_opts("full", opts)
    if not code then code = type(value) == "boolean" and BOOL or default_dtype() end
    return finish(full_("full", nd, fill_value("full", value), code, dev), opts)
  end

  local function like(name, f)
    return function(x, ...)
      check_tensor(name, x)
      local nd = fill_shape_from(x)
      return f(nd, x, ...)
    end
  end

  local function like_opts(name, x, opts)
    local code, dev = parse_opts(name, opts)
    return code or dtype_of(x), dev or device_of(x)
  end

  dl.zeros_like = like("zeros_like", function(nd, x, opts)
    local code, dev = like_opts("zeros_like", x, opts)
    return finish(full_("zeros", nd, 0, code, dev), opts)
  end)
  dl.ones_like = like("ones_like", function(nd, x, opts)
    local code, dev = like_opts("ones_like", x, opts)
    return finish(full_("ones", nd, 1, code, dev), opts)
  end)
  dl.full_like = like("full_like", function(nd, x, value, opts)
    local code, dev = like_opts("full_like", x, opts)
    return finish(full_("full_like", nd, fill_value("full_like", value), code, dev), opts)
  end)
  dl.empty_like = like("empty_like", function(nd, x, opts)
    local code, dev = like_opts("empty_like", x, opts)
    return finish(new(C.dl_empty, shape_buf, nd, code, dev), opts)
  end)
  -- (checked here, the engine's error naming rand)
  local FLOATS = { float16 = true, bfloat16 = true, float32 = true, float64 = true }
  local function floating_code(op, code)
    if not FLOATS[dtype_names[code]] then raise(op .. ": expected a floating dtype, got " .. dtype_names[code]) end
    return code
  end
  dl.rand_like = like("rand_like", function(nd, x, opts)
    local code, dev = like_opts("rand_like", x, opts)
    return finish(new(C.dl_rand, shape_buf, nd, floating_code("rand_like", code), dev), opts)
  end)
  dl.randn_like = like("randn_like", function(nd, x, opts)
    local code, dev = like_opts("randn_like", x, opts)
    return finish(new(C.dl_randn, shape_buf, nd, floating_code("randn_like", code), dev), opts)
  end)
  dl.randint_like = like("randint_like", function(nd, x, lo, hi, opts)
    int_arg("randint_like", lo, "bound")
    int_arg("randint_like", hi, "bound")
    local code, dev = like_opts("randint_like", x, opts)
    return finish(new(C.dl_randint, lo, hi, shape_buf, nd, code, dev), opts)
  end)

  -- Leading numbers, then an optional options table or dtype name.
  local function numbers_then_opts(op, min, max, ...)
    local n = select("#", ...)
    local vals, opts = {}, nil
    for i = 1, n do
      local v = select(i, ...)
      if type(v) == "number" and #vals < max then
        vals[#vals + 1] = v
      elseif i == n and #vals >= min and (type(v) == "table" or type(v) == "string") then
        opts = v
      elseif v ~= nil then
        bad_arg(op, "a number", v)
      end
    end
    if #vals < min then raise(op .. ": expected at least " .. min .. " numbers, got " .. #vals) end
    return vals, opts
  end

  -- dl.arange([start,] stop [, step] [, opts]): start, start + step, ... below stop.
  function dl.arange(...)
    local v, opts = numbers_then_opts("arange", 1, 3, ...)
    local start, stop, step = 0, v[1], 1
    if #v >= 2 then start, stop = v[1], v[2] end
    if #v == 3 then step = v[3] end
    local code, dev = parse_opts("arange", opts)
    return finish(new(C.dl_arange, start, stop, step, code or default_dtype(), dev), opts)
  end

  function dl.linspace(...)
    local v, opts = numbers_then_opts("linspace", 3, 3, ...)
    local code, dev = parse_opts("linspace", opts)
    int_arg("linspace", v[3], "number of points")
    return finish(new(C.dl_linspace, v[1], v[2], v[3], code or default_dtype(), dev), opts)
  end

  -- dl.logspace(a, b, n [, base = 10] [, opts]): base^linspace(a, b, n).
  function dl.logspace(...)
    local v, opts = numbers_then_opts("logspace", 3, 4, ...)
    local base = v[4] or 10
    local code, dev = parse_opts("logspace", opts)
    int_arg("logspace", v[3], "number of points")
    local dt = code or default_dtype()
    -- (the exponents in double, as PyTorch computes them, then the powers in the dtype)
    local e = new(C.dl_linspace, v[1], v[2], v[3], core.dtype_codes.float64, dev)
    return finish(to_dtype(dl.pow(base, e), dt), opts)
  end

  -- dl.meshgrid(x1, x2, ... [, {indexing = "ij"}]): for 1-D tensors of sizes n1, n2 ...,
  -- as many tensors of shape (n1, n2, ...), the k-th varying along dim k ("xy": the first
  -- two dims swapped, as numpy's default), returned as values.
  function dl.meshgrid(...)
    local first = ...
    if type(first) == "table" and not istype(Tensor, first) and istype(Tensor, first[1]) then   -- ({a, b} [, opts])
      local list, opts = first, select(2, ...)
      local args = {}
      for i = 1, #list do args[i] = list[i] end
      if opts ~= nil then args[#list + 1] = opts end
      return dl.meshgrid(unpack(args, 1, #list + (opts ~= nil and 1 or 0)))
    end
    local n = select("#", ...)
    local opts = n > 0 and type(select(n, ...)) == "table" and not istype(Tensor, select(n, ...)) and select(n, ...) or nil
    if opts then n = n - 1 end
    local list = {}
    for i = 1, n do
      local t = select(i, ...)
      check_tensor("meshgrid", t)
      if t:dim() == 0 then t = t:reshape({ 1 }) end   -- (PyTorch's: one point)
      if t:dim() ~= 1 then raise("meshgrid: expected 1-D tensors, got shape " .. shape_str(t.shape) .. " for tensor " .. i) end
      list[i] = t
    end
    if n == 0 then raise("meshgrid: expected at least one tensor") end
    local indexing = opts and opts.indexing or "ij"
    if indexing ~= "ij" and indexing ~= "xy" then raise("meshgrid: indexing must be \"ij\" or \"xy\", got " .. tostring(indexing)) end
    local shape = {}
    for i = 1, n do shape[i] = list[i]:size(1) end
    local out = {}
    for i = 1, n do
      local view = {}
      for k = 1, n do view[k] = k == i and shape[i] or 1 end
      out[i] = list[i]:view(view):expand(shape)
      if indexing == "xy" and n >= 2 then out[i] = out[i]:transpose(1, 2) end
    end
    return unpack(out, 1, n)
  end

  -- dl.eye(n [, m] [, opts]), or with the shape as a table: dl.eye({n, m} [, opts]).
  function dl.eye(...)
    local first = ...
    if type(first) == "table" and (first[1] ~= nil or next(first) == nil) then
      if #first < 1 or #first > 2 then raise("eye: expected a shape of one or two sizes, got " .. #first) end
      if select("#", ...) > 2 then raise("eye: unexpected arguments after the shape and the options") end
      return dl.eye(first[1], first[2] or first[1], (select(2, ...)))
    end
    local v, opts = numbers_then_opts("eye", 1, 2, ...)
    local n = int_arg("eye", v[1], "size")
    local m = v[2] == nil and n or int_arg("eye", v[2], "size")
    local code, dev = parse_opts("eye", opts)
    return finish(new(C.dl_eye, n, m, code or default_dtype(), dev), opts)
  end

  function dl.rand(...)
    local nd, opts = parse_shape("rand", true, ...)
    local code, dev = parse_opts("rand", opts)
    return finish(new(C.dl_rand, shape_buf, nd, code or default_dtype(), dev), opts)
  end

  function dl.randn(...)
    local nd, opts = parse_shape("randn", true, ...)
    local code, dev = parse_opts("randn", opts)
    return finish(new(C.dl_randn, shape_buf, nd, code or default_dtype(), dev), opts)
  end

  -- dl.randint(lo, hi, shape... [, opts]): integers in [lo, hi) (hi excluded, as
  -- PyTorch's), int64 unless opts says otherwise.
  function dl.randint(lo, hi, ...)
    int_arg("randint", lo, "bound")
    int_arg("randint", hi, "bound")
    local nd, opts = parse_shape("randint", true, ...)
    local code, dev = parse_opts("randint", opts)
    return finish(new(C.dl_randint, lo, hi, shape_buf, nd, code or INT64, dev), opts)
  end

  -- A random permutation of 1..n (1-based, to index with).
  function dl.randperm(n, opts)
    int_arg("randperm", n, "size")
    local code = parse_opts("randperm", opts)
    return finish(new(C.dl_randperm, n, code or INT64), opts)
  end

  function dl.manual_seed(n)
    int_arg("manual_seed", n, "seed")
    C.dl_manual_seed(n)
  end

  function dl.initial_seed() return C.dl_initial_seed() end

  -- The random generator's state, { seed = s, offset = k } (how far its stream has been
  -- read); dl.set_rng_state(state) goes back to it, and the same numbers come again.
  function dl.get_rng_state()
    local state_buf = ffi.new("double[2]")   -- fresh per call: Note [Values C writes back]
    C.dl_rng_state(state_buf)
    return { seed = state_buf[0], offset = state_buf[1] }
  end
  function dl.set_rng_state(s)
    if type(s) ~= "table" or type(s.seed) ~= "number" or type(s.offset) ~= "number" then
      raise("set_rng_state: expected a state from dl.get_rng_state(), got " .. typename(s))
    end
    if C.dl_set_rng_state(s.seed, s.offset) ~= 0 then raise_last() end
  end

  function dl.set_default_dtype(name)
    if C.dl_set_default_dtype(dtype_code("set_default_dtype", name)) ~= 0 then raise_last() end
  end

  function dl.get_default_dtype() return dtype_names[C.dl_default_dtype()] end

  -- The CPU threads of this Lua state's ops (OpenMP loops and OpenBLAS's larger
  -- products), as torch.set_num_threads: at start, OMP_NUM_THREADS or the core count.
  function dl.set_num_threads(n)
    if type(n) ~= "number" or n ~= floor(n) or n < 1 then
      raise("set_num_threads: expected an integer >= 1, got " .. tostring(n))
    end
    if C.dl_set_num_threads(n) ~= 0 then raise_last() end
  end
  function dl.get_num_threads() return C.dl_get_num_threads() end

  -- dl.tensor(data [, opts]): data is a number, a boolean, a tensor (copied) or nested
  -- tables of those. Lua has one number type, so numbers make the default float dtype
  -- whatever their values (a whole number is not an integer here: the dtype never
  -- depends on the data); booleans alone make bool; ask for integers with
  -- {dtype = "int64"}. Tensors inside the tables keep their dtype when they are all the
  -- same and there are no Lua numbers.
  function dl.tensor(data, opts)
    local code, dev = parse_opts("tensor", opts)
    if istype(Tensor, data) then
      local y = methods.clone(data)
      if code then y = to_dtype(y, code) end
      if dev then y = to_device(y, dev) end
      return finish(y, opts)
    end
    local td = type(data)
    if td == "number" or td == "boolean" then
      if not code then code = td == "boolean" and BOOL or default_dtype() end
      return finish(full_("tensor", 0, fill_value("tensor", data), code, dev), opts)
    end
    if td ~= "table" then bad_arg("tensor", "a number, a boolean, a table or a tensor", data) end
    -- The shape, from the first element at each depth.
    local shape, nd = {}, 0
    local v = data
    while true do
      if istype(Tensor, v) then
        local s = shape_of(v)
        for i = 1, #s do shape[nd + i] = s[i] end
        nd = nd + #s
        break
      elseif type(v) == "table" then
        nd = nd + 1
        shape[nd] = #v
        if #v == 0 then break end
        v = v[1]
      else
        break
      end
    end
    if nd > 8 then raise("tensor: at most 8 dimensions are supported, got " .. nd) end
    local n = 1
    for i = 1, nd do n = n * shape[i] end
    local buf = ffi_new("double[?]", n > 0 and n or 1)
    local k, nnum, nbool, tdtype = 0, 0, 0, nil
    local function fill(x, d)
      local tx = type(x)
      if d > nd then
        if tx == "number" then
          buf[k] = x
          nnum = nnum + 1
        elseif tx == "boolean" then
          buf[k] = x and 1 or 0
          nbool = nbool + 1
        else
          raise("tensor: expected a number or a boolean, got " .. typename(x))
        end
        k = k + 1
      elseif istype(Tensor, x) then
        local s = shape_of(x)
        local ok = #s == nd - d + 1
        for i = 1, #s do ok = ok and s[i] == shape[d + i - 1] end
        if not ok then
          raise("tensor: a tensor of shape " .. shape_str(s) .. " does not fit at dimension " .. d
                .. " of shape " .. shape_str(shape))
        end
        local cnt = C.dl_numel(x)
        if cnt > 0 and C.dl_read(x, buf + k, cnt) ~= 0 then raise_last() end
        k = k + cnt
        local dt = dtype_of(x)
        if tdtype == nil or tdtype == dt then tdtype = dt else tdtype = false end
      elseif tx == "table" then
        local len = #x
        -- # of a table with a hole or other keys is any border: count every key, so
        -- that data past a nil or under a name is refused rather than dropped
        local keys = 0
        for _ in pairs(x) do keys = keys + 1 end
        if keys ~= len then raise("tensor: the table at dimension " .. d .. " has holes or non-integer keys") end
        if len ~= shape[d] then
          raise("tensor: inconsistent sizes: expected " .. shape[d] .. " elements at dimension "
                .. d .. ", got " .. len)
        end
        for i = 1, len do fill(x[i], d + 1) end
      else
        raise("tensor: expected a table at dimension " .. d .. ", got " .. typename(x))
      end
    end
    fill(data, 1)
    if not code then
      if tdtype and nnum == 0 and nbool == 0 then code = tdtype
      elseif nbool > 0 and nnum == 0 and not tdtype then code = BOOL
      else code = default_dtype() end
    end
    for i = 1, nd do shape_buf[i - 1] = shape[i] end
    local id = C.dl_from_values(buf, n, shape_buf, nd, code, dev)
    if id == 0 and retry() then id = C.dl_from_values(buf, n, shape_buf, nd, code, dev) end
    return finish(wrap(id), opts)
  end

  -- dl.from_ptr(ptr, shape, dtype [, strides]): a zero-copy view of host memory that the
  -- caller keeps alive. ptr is a cdata pointer, a light userdata or an address number.
  function dl.from_ptr(ptr, shape, dtype, strides)
    local tp = type(ptr)
    if tp == "number" then
      ptr = ffi_cast("void*", ptr)
    elseif tp ~= "cdata" and tp ~= "userdata" then
      bad_arg("from_ptr", "a pointer (cdata, light userdata or address)", ptr)
    end
    local nd = parse_shape("from_ptr", false, shape)
    local code = dtype_code("from_ptr", dtype == nil and "float32" or dtype)
    local st = nil
    if strides ~= nil then
      if type(strides) ~= "table" or #strides ~= nd then
        raise("from_ptr: expected " .. nd .. " strides, got " .. typename(strides))
      end
      st = ffi_new("int64_t[?]", nd)
      for i = 1, nd do st[i - 1] = int_arg("from_ptr", strides[i], "stride") end
    end
    return wrap(C.dl_from_ptr(ptr, shape_buf, nd, st, code))
  end
end
