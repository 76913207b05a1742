-- dl.export.onnx from Lua: files written atomically, the report, refusals that name the
-- op, and dl.export.to_onnx. The models' contents are checked by ONNX itself and by an
-- independent evaluator in tests/onnx/check_onnx.py.
local dl = require("dlua")
local H = require("harness")

local dir = os.getenv("TMPDIR") or "/tmp"
local stem = dir .. "/dlua_onnx_" .. os.time() .. "_" .. math.random(1e6)
local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end
local function built()
  local ok, err = pcall(dl.export.to_onnx, stem .. ".missing.dlg", stem .. ".x.onnx")
  return ok or not tostring(err):find("built without ONNX support", 1, true), err
end

H.test("an exported model is an ONNX file; the temporary .dlg is gone", function()
  if not built() then print("skipped: this dlua was built without libonnx-dev") return end
  local lin = dl.nn.Linear(4, 3)
  local path = stem .. ".onnx"
  local r = dl.export.onnx(function(x) return lin(x):relu() end, { dl.randn(2, 4) }, { path = path })
  H.ok(exists(path), "the .onnx file exists")
  H.ok(not exists(path .. ".dlg.tmp") and not exists(path .. ".tmp"), "no temporary file is left")
  H.ok(r.text:find("ONNX opset 17", 1, true) ~= nil, r.text)
  local f = io.open(path, "rb")
  local bytes = f:read("*a")
  f:close()
  H.ok(#bytes > 4 * 3 * 4 and bytes:find("dlua", 1, true) ~= nil, "a protobuf naming its producer")
  -- and from a .dlg file that dl.export wrote
  dl.export(function(x) return lin(x) end, { dl.randn(2, 4) }, { path = stem .. ".dlg" })
  dl.export.to_onnx(stem .. ".dlg", stem .. "2.onnx")
  H.ok(exists(stem .. "2.onnx"), "to_onnx wrote its file")
  os.remove(path); os.remove(stem .. ".dlg"); os.remove(stem .. "2.onnx")
end)

H.test("an op with no ONNX lowering is named, and nothing is written", function()
  if not built() then print("skipped: this dlua was built without libonnx-dev") return end
  local path = stem .. "_sort.onnx"
  H.raises(function()
    dl.export.onnx(function(x) return (x:sort(1)) end, { dl.randn(5) }, { path = path })
  end, "export.onnx: no ONNX lowering for op sort")
  H.ok(not exists(path) and not exists(path .. ".dlg.tmp"), "nothing is left behind")
  H.raises(function()
    dl.export.onnx(function(x) return dl.nn.functional.batch_norm(x, nil, nil, nil, nil, true) end,
                   { dl.randn(4, 3) }, { path = path })
  end, "export")
  H.raises(function() dl.export.to_onnx(stem .. ".none.dlg", path) end, "export.onnx: cannot open")
  H.raises(function() dl.export.onnx(function(x) return x end, { dl.ones(1) }, {}) end,
           "export.onnx: expected opts.path")
end)

H.run()
