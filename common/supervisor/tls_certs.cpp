#include "common/supervisor/tls_certs.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace h3pipe::supervisor {
namespace {

template <auto F>
struct Free {
  template <class T>
  void operator()(T* p) const {
    if (p) F(p);
  }
};
using Key = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Free<X509_free>>;
using Bio = std::unique_ptr<BIO, Free<BIO_free>>;

Error ossl_error(const std::string& what) {
  const unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return make_error(errc::acl::kTls, "{}: {}", what, buf);
}

std::string bio_text(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return std::string(data, static_cast<std::size_t>(n));
}

Result<Pem> to_pem(X509* x, EVP_PKEY* k) {
  Bio c(BIO_new(BIO_s_mem())), kb(BIO_new(BIO_s_mem()));
  if (!c || !kb || PEM_write_bio_X509(c.get(), x) != 1 ||
      PEM_write_bio_PrivateKey(kb.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return ossl_error("cannot write PEM");
  return Pem{bio_text(c.get()), bio_text(kb.get())};
}

bool add_ext(X509* x, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, x, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(x, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A new certificate for `key`, "CN=<cn>", not signed yet; issuer = itself when `issuer` is null.
Result<Cert> new_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, int days) {
  Cert x(X509_new());
  std::unique_ptr<BIGNUM, Free<BN_free>> serial(BN_new());
  if (!x || !serial || X509_set_version(x.get(), 2) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x.get())) ||
      !X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(x.get()), static_cast<long>(days) * 86400) ||
      X509_set_pubkey(x.get(), key) != 1)
    return ossl_error("cannot make a certificate for " + cn);
  X509_NAME* name = X509_get_subject_name(x.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name) != 1)
    return ossl_error("cannot name the certificate " + cn);
  return x;
}

}  // namespace

bool is_ip_literal(const std::string& s) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

Result<Pem> make_ca(const std::string& name, int days) {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return ossl_error("cannot make the CA key");
  auto x = new_cert(key.get(), name, nullptr, days);
  if (!x.ok()) return x.error();
  X509* c = x->get();
  if (!add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_ext(c, c, NID_subject_key_identifier, "hash") ||
      X509_sign(c, key.get(), EVP_sha256()) == 0)
    return ossl_error("cannot sign the CA " + name);
  return to_pem(c, key.get());
}

Result<Pem> issue_cert(const Pem& ca, const std::string& subject, bool server, int days) {
  Bio cb(BIO_new_mem_buf(ca.cert.data(), static_cast<int>(ca.cert.size())));
  Bio kb(BIO_new_mem_buf(ca.key.data(), static_cast<int>(ca.key.size())));
  Cert ca_cert(cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr);
  Key ca_key(kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!ca_cert || !ca_key) return ossl_error("cannot read the CA");
  Key key(EVP_EC_gen("P-256"));
  if (!key) return ossl_error("cannot make a key for " + subject);
  auto x = new_cert(key.get(), subject, ca_cert.get(), days);
  if (!x.ok()) return x.error();
  X509* c = x->get();
  const std::string san = (is_ip_literal(subject) ? "IP:" : "DNS:") + subject;
  if (!add_ext(c, ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(c, ca_cert.get(), NID_key_usage, "critical,digitalSignature,keyAgreement") ||
      !add_ext(c, ca_cert.get(), NID_ext_key_usage, server ? "serverAuth" : "clientAuth") ||
      !add_ext(c, ca_cert.get(), NID_subject_alt_name, san.c_str()) ||
      !add_ext(c, ca_cert.get(), NID_authority_key_identifier, "keyid:always") ||
      X509_sign(c, ca_key.get(), EVP_sha256()) == 0)
    return ossl_error("cannot sign the certificate of " + subject);
  return to_pem(c, key.get());
}

}  // namespace h3pipe::supervisor
