//! `ds-testpki DIR`: writes ca.pem, server.pem and server.key (a fresh test
//! CA and a certificate for 127.0.0.1/localhost) into DIR, for scripts that
//! run the server over TLS.

fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: ds-testpki DIR"))?;
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir)?;
    let pki = ds_testpki::generate()?;
    std::fs::write(dir.join("ca.pem"), pki.ca_pem)?;
    std::fs::write(dir.join("server.pem"), pki.cert_pem)?;
    std::fs::write(dir.join("server.key"), pki.key_pem)?;
    Ok(())
}
