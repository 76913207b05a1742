// string.find / match / gmatch / gsub for the sandbox: Lua 5.1's pattern matcher
// (lstrlib.c, MIT licence, as LuaJIT 2.1 implements it) plus a poll of the runtime's
// stop check every few thousand steps. LuaJIT's own matcher is a C function that a
// hook cannot preempt, so a pattern like ("a?"):rep(30)..("a"):rep(30) would hang the
// host past any time limit (docs/design.md, "Patterns under the time limit"; Luau does the same in
// lstrlib.cpp). Everything here is plain C style: errors longjmp through these frames.
#include <cctype>
#include <cstring>

#include "vm/runtime_impl.h"

namespace dlua::vm {
namespace {

constexpr char kEsc = '%';
constexpr const char* kSpecials = "^$*+?.([%-";
constexpr int kMaxCaptures = 32;     // LUA_MAXCAPTURES
constexpr int kMaxDepth = 200;       // recursion of match(): "pattern too complex"
constexpr unsigned kPollEvery = 4096;
constexpr ptrdiff_t kCapUnfinished = -1;
constexpr ptrdiff_t kCapPosition = -2;

struct MatchState {
  const char* src_init;
  const char* src_end;
  lua_State* L;
  Runtime::Impl* rt;
  int level;
  int depth;
  unsigned steps;
  struct {
    const char* init;
    ptrdiff_t len;
  } capture[kMaxCaptures];
};

inline int uchar(char c) { return static_cast<unsigned char>(c); }

void poll(MatchState* ms) {
  if (++ms->steps % kPollEvery == 0 && ms->rt->check_stop()) ms->rt->raise_stop();
}

const char* match(MatchState* ms, const char* s, const char* p);

int check_capture(MatchState* ms, int l) {
  l -= '1';
  if (l < 0 || l >= ms->level || ms->capture[l].len == kCapUnfinished)
    return luaL_error(ms->L, "invalid capture index");
  return l;
}

int capture_to_close(MatchState* ms) {
  int level = ms->level;
  for (level--; level >= 0; level--)
    if (ms->capture[level].len == kCapUnfinished) return level;
  return luaL_error(ms->L, "invalid pattern capture");
}

const char* class_end(MatchState* ms, const char* p) {
  switch (*p++) {
    case kEsc:
      if (*p == '\0') luaL_error(ms->L, "malformed pattern (ends with '%%')");
      return p + 1;
    case '[':
      if (*p == '^') p++;
      do {  // look for a ']'
        if (*p == '\0') luaL_error(ms->L, "malformed pattern (missing ']')");
        if (*(p++) == kEsc && *p != '\0') p++;  // skip escapes (e.g. '%]')
      } while (*p != ']');
      return p + 1;
    default:
      return p;
  }
}

int match_class(int c, int cl) {
  int res;
  switch (std::tolower(cl)) {
    case 'a': res = std::isalpha(c); break;
    case 'c': res = std::iscntrl(c); break;
    case 'd': res = std::isdigit(c); break;
    case 'l': res = std::islower(c); break;
    case 'p': res = std::ispunct(c); break;
    case 's': res = std::isspace(c); break;
    case 'u': res = std::isupper(c); break;
    case 'w': res = std::isalnum(c); break;
    case 'x': res = std::isxdigit(c); break;
    case 'z': res = (c == 0); break;
    default: return cl == c;
  }
  if (std::isupper(cl)) res = !res;
  return res;
}

int match_bracket_class(int c, const char* p, const char* ec) {
  int sig = 1;
  if (*(p + 1) == '^') {
    sig = 0;
    p++;  // skip the '^'
  }
  while (++p < ec) {
    if (*p == kEsc) {
      p++;
      if (match_class(c, uchar(*p))) return sig;
    } else if (*(p + 1) == '-' && p + 2 < ec) {
      p += 2;
      if (uchar(*(p - 2)) <= c && c <= uchar(*p)) return sig;
    } else if (uchar(*p) == c) {
      return sig;
    }
  }
  return !sig;
}

int single_match(int c, const char* p, const char* ep) {
  switch (*p) {
    case '.': return 1;
    case kEsc: return match_class(c, uchar(*(p + 1)));
    case '[': return match_bracket_class(c, p, ep - 1);
    default: return uchar(*p) == c;
  }
}

const char* match_balance(MatchState* ms, const char* s, const char* p) {
  if (*p == 0 || *(p + 1) == 0) luaL_error(ms->L, "unbalanced pattern");
  if (s >= ms->src_end || *s != *p) return nullptr;
  int b = *p, e = *(p + 1), cont = 1;
  while (++s < ms->src_end) {
    poll(ms);
    if (*s == e) {
      if (--cont == 0) return s + 1;
    } else if (*s == b) {
      cont++;
    }
  }
  return nullptr;
}

const char* max_expand(MatchState* ms, const char* s, const char* p, const char* ep) {
  ptrdiff_t i = 0;
  while (s + i < ms->src_end && single_match(uchar(*(s + i)), p, ep)) {
    poll(ms);
    i++;
  }
  while (i >= 0) {  // try with the maximum repetitions, then fewer
    const char* res = match(ms, s + i, ep + 1);
    if (res) return res;
    i--;
  }
  return nullptr;
}

const char* min_expand(MatchState* ms, const char* s, const char* p, const char* ep) {
  for (;;) {
    const char* res = match(ms, s, ep + 1);
    if (res != nullptr) return res;
    if (s < ms->src_end && single_match(uchar(*s), p, ep)) s++;
    else return nullptr;
  }
}

const char* start_capture(MatchState* ms, const char* s, const char* p, ptrdiff_t what) {
  int level = ms->level;
  if (level >= kMaxCaptures) luaL_error(ms->L, "too many captures");
  ms->capture[level].init = s;
  ms->capture[level].len = what;
  ms->level = level + 1;
  const char* res = match(ms, s, p);
  if (res == nullptr) ms->level--;
  return res;
}

const char* end_capture(MatchState* ms, const char* s, const char* p) {
  int l = capture_to_close(ms);
  ms->capture[l].len = s - ms->capture[l].init;
  const char* res = match(ms, s, p);
  if (res == nullptr) ms->capture[l].len = kCapUnfinished;
  return res;
}

const char* match_capture(MatchState* ms, const char* s, int l) {
  l = check_capture(ms, l);
  size_t len = size_t(ms->capture[l].len);
  if (size_t(ms->src_end - s) >= len && std::memcmp(ms->capture[l].init, s, len) == 0)
    return s + len;
  return nullptr;
}

const char* match(MatchState* ms, const char* s, const char* p) {
  if (++ms->depth > kMaxDepth) luaL_error(ms->L, "pattern too complex");
  poll(ms);
  const char* r;
init:
  switch (*p) {
    case '(':
      if (*(p + 1) == ')') r = start_capture(ms, s, p + 2, kCapPosition);
      else r = start_capture(ms, s, p + 1, kCapUnfinished);
      goto done;
    case ')':
      r = end_capture(ms, s, p + 1);
      goto done;
    case kEsc:
      switch (*(p + 1)) {
        case 'b':
          s = match_balance(ms, s, p + 2);
          if (s == nullptr) { r = nullptr; goto done; }
          p += 4;
          goto init;
        case 'f': {
          p += 2;
          if (*p != '[') luaL_error(ms->L, "missing '[' after '%%f' in pattern");
          const char* ep = class_end(ms, p);
          char previous = (s == ms->src_init) ? '\0' : *(s - 1);
          char current = (s < ms->src_end) ? *s : '\0';
          if (match_bracket_class(uchar(previous), p, ep - 1) ||
              !match_bracket_class(uchar(current), p, ep - 1)) {
            r = nullptr;
            goto done;
          }
          p = ep;
          goto init;
        }
        default:
          if (std::isdigit(uchar(*(p + 1)))) {
            s = match_capture(ms, s, uchar(*(p + 1)));
            if (s == nullptr) { r = nullptr; goto done; }
            p += 2;
            goto init;
          }
          goto dflt;
      }
    case '\0':
      r = s;
      goto done;
    case '$':
      if (*(p + 1) == '\0') {
        r = (s == ms->src_end) ? s : nullptr;
        goto done;
      }
      goto dflt;
    default:
    dflt: {
      const char* ep = class_end(ms, p);
      int m = s < ms->src_end && single_match(uchar(*s), p, ep);
      switch (*ep) {
        case '?':
          if (m && (r = match(ms, s + 1, ep + 1)) != nullptr) goto done;
          p = ep + 1;
          goto init;
        case '*':
          r = max_expand(ms, s, p, ep);
          goto done;
        case '+':
          r = m ? max_expand(ms, s + 1, p, ep) : nullptr;
          goto done;
        case '-':
          r = min_expand(ms, s, p, ep);
          goto done;
        default:
          if (!m) { r = nullptr; goto done; }
          s++;
          p = ep;
          goto init;
      }
    }
  }
done:
  ms->depth--;
  return r;
}

void push_onecapture(MatchState* ms, int i, const char* s, const char* e) {
  if (i >= ms->level) {
    if (i == 0) lua_pushlstring(ms->L, s, size_t(e - s));  // the whole match
    else luaL_error(ms->L, "invalid capture index");
  } else {
    ptrdiff_t l = ms->capture[i].len;
    if (l == kCapUnfinished) luaL_error(ms->L, "unfinished capture");
    if (l == kCapPosition)
      lua_pushinteger(ms->L, ms->capture[i].init - ms->src_init + 1);
    else
      lua_pushlstring(ms->L, ms->capture[i].init, size_t(l));
  }
}

int push_captures(MatchState* ms, const char* s, const char* e) {
  int nlevels = (ms->level == 0 && s) ? 1 : ms->level;
  luaL_checkstack(ms->L, nlevels, "too many captures");
  for (int i = 0; i < nlevels; i++) push_onecapture(ms, i, s, e);
  return nlevels;
}

void init_state(MatchState* ms, lua_State* L, const char* s, size_t len) {
  ms->L = L;
  ms->rt = impl_of(L);
  ms->src_init = s;
  ms->src_end = s + len;
  ms->level = 0;
  ms->depth = 0;
  ms->steps = 0;
}

ptrdiff_t posrelat(ptrdiff_t pos, size_t len) {
  if (pos < 0) pos += ptrdiff_t(len) + 1;  // negative counts from the end
  return pos >= 0 ? pos : 0;
}

const char* mem_find(const char* s1, size_t l1, const char* s2, size_t l2) {
  if (l2 == 0) return s1;
  if (l2 > l1) return nullptr;
  const char* init;
  l2--;  // the first char is checked by memchr
  l1 = l1 - l2;
  while (l1 > 0 && (init = static_cast<const char*>(std::memchr(s1, *s2, l1))) != nullptr) {
    init++;
    if (std::memcmp(init, s2 + 1, l2) == 0) return init - 1;
    l1 -= size_t(init - s1);
    s1 = init;
  }
  return nullptr;
}

int str_find_aux(lua_State* L, bool find) {
  size_t l1, l2;
  const char* s = luaL_checklstring(L, 1, &l1);
  const char* p = luaL_checklstring(L, 2, &l2);
  ptrdiff_t init = posrelat(luaL_optinteger(L, 3, 1), l1) - 1;
  if (init < 0) init = 0;
  if (size_t(init) > l1) init = ptrdiff_t(l1);  // as Lua 5.1 and this LuaJIT: clamped
  if (find && (lua_toboolean(L, 4) || std::strpbrk(p, kSpecials) == nullptr)) {
    const char* s2 = mem_find(s + init, l1 - size_t(init), p, l2);
    if (s2) {
      lua_pushinteger(L, s2 - s + 1);
      lua_pushinteger(L, s2 - s + ptrdiff_t(l2));
      return 2;
    }
  } else {
    MatchState ms;
    bool anchor = (*p == '^');
    if (anchor) p++;
    const char* s1 = s + init;
    init_state(&ms, L, s, l1);
    do {
      ms.level = 0;
      ms.depth = 0;
      const char* res = match(&ms, s1, p);
      if (res != nullptr) {
        if (find) {
          lua_pushinteger(L, s1 - s + 1);  // start
          lua_pushinteger(L, res - s);     // end
          return push_captures(&ms, nullptr, nullptr) + 2;
        }
        return push_captures(&ms, s1, res);
      }
    } while (s1++ < ms.src_end && !anchor);
  }
  lua_pushnil(L);
  return 1;
}

int str_find(lua_State* L) { return str_find_aux(L, true); }
int str_match(lua_State* L) { return str_find_aux(L, false); }

int gmatch_aux(lua_State* L) {
  MatchState ms;
  size_t ls;
  const char* s = lua_tolstring(L, lua_upvalueindex(1), &ls);
  const char* p = lua_tostring(L, lua_upvalueindex(2));
  init_state(&ms, L, s, ls);
  for (const char* src = s + size_t(lua_tointeger(L, lua_upvalueindex(3)));
       src <= ms.src_end; src++) {
    ms.level = 0;
    ms.depth = 0;
    const char* e = match(&ms, src, p);
    if (e != nullptr) {
      lua_Integer newstart = e - s;
      if (e == src) newstart++;  // an empty match: go at least one position
      lua_pushinteger(L, newstart);
      lua_replace(L, lua_upvalueindex(3));
      return push_captures(&ms, src, e);
    }
  }
  return 0;
}

int str_gmatch(lua_State* L) {
  luaL_checkstring(L, 1);
  luaL_checkstring(L, 2);
  lua_settop(L, 2);
  lua_pushinteger(L, 0);
  lua_pushcclosure(L, gmatch_aux, 3);
  return 1;
}

void add_s(MatchState* ms, luaL_Buffer* b, const char* s, const char* e) {
  size_t l;
  const char* news = lua_tolstring(ms->L, 3, &l);
  for (size_t i = 0; i < l; i++) {
    if (news[i] != kEsc) {
      luaL_addchar(b, news[i]);
    } else {
      i++;  // skip the escape
      if (!std::isdigit(uchar(news[i]))) {
        luaL_addchar(b, news[i]);
      } else if (news[i] == '0') {
        luaL_addlstring(b, s, size_t(e - s));
      } else {
        push_onecapture(ms, news[i] - '1', s, e);
        luaL_addvalue(b);
      }
    }
  }
}

void add_value(MatchState* ms, luaL_Buffer* b, const char* s, const char* e) {
  lua_State* L = ms->L;
  switch (lua_type(L, 3)) {
    case LUA_TNUMBER:
    case LUA_TSTRING:
      add_s(ms, b, s, e);
      return;
    case LUA_TFUNCTION: {
      lua_pushvalue(L, 3);
      int n = push_captures(ms, s, e);
      lua_call(L, n, 1);
      break;
    }
    case LUA_TTABLE:
      push_onecapture(ms, 0, s, e);
      lua_gettable(L, 3);
      break;
  }
  if (!lua_toboolean(L, -1)) {  // nil or false: keep the original text
    lua_pop(L, 1);
    lua_pushlstring(L, s, size_t(e - s));
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  }
  luaL_addvalue(b);
}

int str_gsub(lua_State* L) {
  size_t srcl;
  const char* src = luaL_checklstring(L, 1, &srcl);
  const char* p = luaL_checkstring(L, 2);
  int tr = lua_type(L, 3);
  lua_Integer max_s = luaL_optinteger(L, 4, lua_Integer(srcl) + 1);
  bool anchor = (*p == '^');
  if (anchor) p++;
  luaL_argcheck(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION ||
                       tr == LUA_TTABLE,
                3, "string/function/table expected");
  MatchState ms;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  init_state(&ms, L, src, srcl);
  lua_Integer n = 0;
  while (n < max_s) {
    ms.level = 0;
    ms.depth = 0;
    const char* e = match(&ms, src, p);
    if (e) {
      n++;
      add_value(&ms, &b, src, e);
    }
    if (e && e > src) src = e;  // a non-empty match: go on after it
    else if (src < ms.src_end) luaL_addchar(&b, *src++);
    else break;
    if (anchor) break;
  }
  luaL_addlstring(&b, src, size_t(ms.src_end - src));
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

}  // namespace

void install_safe_patterns(lua_State* L, int idx) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  const luaL_Reg fns[] = {{"find", str_find}, {"match", str_match}, {"gmatch", str_gmatch},
                          {"gsub", str_gsub}, {nullptr, nullptr}};
  for (const luaL_Reg* f = fns; f->name; ++f) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, idx, f->name);
  }
}

}  // namespace dlua::vm
