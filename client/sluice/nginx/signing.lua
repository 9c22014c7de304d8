-- Sluice for nginx: the Ed25519 check of a signed bundle, as sluice/signing.py does.
--
-- The lua-nginx stack has no Ed25519, so this calls the libcrypto nginx already
-- links (OpenSSL 3) through LuaJIT's FFI: EVP_PKEY_new_raw_public_key with
-- EVP_PKEY_ED25519, EVP_DigestVerifyInit with no digest (Ed25519 hashes the
-- message itself), then the one-shot EVP_DigestVerify over the bundle's bytes;
-- SHA256 for the key ids.
--
-- The keys are a sluice-keys.json document (the control plane's
-- /.well-known/sluice-keys.json, saved): {"keys": [{"kid", "alg", "key"}]}. The
-- signature is the Sluice-Signature header, "<kid>:<base64>".

local ffi = require "ffi"
local cjson = require "cjson.safe"

local C = ffi.C

ffi.cdef [[
typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_md_ctx_st EVP_MD_CTX;
typedef struct engine_st ENGINE;
typedef struct evp_pkey_ctx_st EVP_PKEY_CTX;
typedef struct evp_md_st EVP_MD;
EVP_PKEY *EVP_PKEY_new_raw_public_key(int type, ENGINE *e, const unsigned char *key, size_t keylen);
void EVP_PKEY_free(EVP_PKEY *key);
EVP_MD_CTX *EVP_MD_CTX_new(void);
void EVP_MD_CTX_free(EVP_MD_CTX *ctx);
int EVP_DigestVerifyInit(EVP_MD_CTX *ctx, EVP_PKEY_CTX **pctx, const EVP_MD *type, ENGINE *e, EVP_PKEY *pkey);
int EVP_DigestVerify(EVP_MD_CTX *ctx, const unsigned char *sig, size_t siglen, const unsigned char *tbs, size_t tbslen);
unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);
]]

local EVP_PKEY_ED25519 = 1087 -- NID_ED25519 (openssl/obj_mac.h)

local _M = {}

local function sha256_hex(raw)
  local digest = ffi.new("unsigned char[32]")
  C.SHA256(raw, #raw, digest)
  return (ffi.string(digest, 32):gsub(".", function(c)
    return string.format("%02x", c:byte())
  end))
end

--- The key id of raw public key bytes: "k-" and 16 hex digits of their SHA-256.
local function key_id(raw)
  return "k-" .. sha256_hex(raw):sub(1, 16)
end

--- Parse a sluice-keys.json document: {kid = EVP_PKEY*}; raises naming the fault.
function _M.keyring(text)
  local data = cjson.decode(text)
  if type(data) ~= "table" or type(data.keys) ~= "table" then
    error('a key set is an object with a "keys" array')
  end
  local ring, count = {}, 0
  for index, item in ipairs(data.keys) do
    local where = "keys[" .. (index - 1) .. "]"
    if type(item) ~= "table" or item.alg ~= "Ed25519" then
      error(where .. ': "alg" must be "Ed25519"')
    end
    local raw = type(item.key) == "string" and ngx.decode_base64(item.key)
    if not raw or #raw ~= 32 then
      error(where .. ".key: not the base64 of 32 bytes")
    end
    if item.kid ~= key_id(raw) then
      error(where .. ".kid: " .. tostring(item.kid) .. " is not this key's id " .. key_id(raw))
    end
    local key = C.EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, 32)
    if key == nil then
      error(where .. ".key: libcrypto refused it")
    end
    ring[item.kid] = ffi.gc(key, C.EVP_PKEY_free)
    count = count + 1
  end
  return ring, count
end

--- Read a key set from a file (at nginx's start: a missing file stops nginx).
function _M.load(path)
  local file, err = io.open(path, "rb")
  if not file then
    error("sluice: public_keys: " .. tostring(err))
  end
  local text = file:read("*a")
  file:close()
  local ok, ring = pcall(_M.keyring, text)
  if not ok then
    error("sluice: public_keys: " .. path .. ": " .. tostring(ring))
  end
  return ring
end

local function ids(ring)
  local names = {}
  for kid in pairs(ring) do
    names[#names + 1] = kid
  end
  table.sort(names)
  return #names > 0 and table.concat(names, ", ") or "none"
end

--- Check that `signature` ("<kid>:<base64>") signs `body` with a key of `ring`;
--- return the key id, or nil and why ("signature: ..."), as the Python client says.
function _M.verify(ring, body, signature)
  if type(signature) ~= "string" or signature == "" then
    return nil, "signature: the bundle is not signed"
  end
  local kid, encoded = signature:match("^%s*([^:]*):(.-)%s*$")
  local key = kid and ring[kid]
  if not key then
    return nil, "signature: signed with unknown key '" .. (kid or signature):sub(1, 40)
      .. "' (trusted: " .. ids(ring) .. ")"
  end
  local raw = ngx.decode_base64(encoded)
  local wrong = "signature: the signature by key '" .. kid .. "' does not match the bundle"
  if not raw or #raw ~= 64 then
    return nil, wrong
  end
  local ctx = C.EVP_MD_CTX_new()
  if ctx == nil then
    return nil, "signature: libcrypto could not make a context"
  end
  local ok = C.EVP_DigestVerifyInit(ctx, nil, nil, nil, key) == 1
    and C.EVP_DigestVerify(ctx, raw, 64, body, #body) == 1
  C.EVP_MD_CTX_free(ctx)
  if not ok then
    return nil, wrong
  end
  return kid
end

return _M
