//! Test PKI, generated fresh by every test run: a certificate authority and
//! a server certificate signed by it for `127.0.0.1`, `::1` and `localhost`;
//! and key pairs for signing test JWTs. Nothing here is ever committed.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};

/// PEM texts of a test CA and a server certificate it signed.
pub struct TestPki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new CA and a server certificate for loopback names.
pub fn generate() -> anyhow::Result<TestPki> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "durable-streams test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
    params.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
    params.subject_alt_names.push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
    params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let cert = params.signed_by(&key, &issuer)?;
    Ok(TestPki { ca_pem: ca_cert.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// A JWT signing key pair as PEM: (PKCS#8 private key, SPKI public key).
pub fn jwt_key_pair(alg: JwtKeyAlg) -> anyhow::Result<(String, String)> {
    let key = match alg {
        JwtKeyAlg::Es256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
        JwtKeyAlg::EdDsa => KeyPair::generate_for(&rcgen::PKCS_ED25519)?,
        JwtKeyAlg::Rs256 => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)?,
    };
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtKeyAlg {
    Rs256,
    Es256,
    EdDsa,
}
