//! `durable-streams token …`: make API tokens and their token file, and mint
//! HS256 test JWTs (a real deployment's JWTs come from its identity provider).

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ds_auth::{mint, tokens, Grant, Grants, Op};

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Print a new random API token (keep it secret; the server stores only its digest).
    New,
    /// Read a token on stdin; print a token file granting it the given access.
    File {
        /// Shown in logs instead of the token.
        #[arg(long, default_value = "token")]
        name: String,
        /// PREFIX=OPS, e.g. 'chat/=read,write' or '=read' (every path); repeatable.
        #[arg(long = "grant", required = true)]
        grants: Vec<String>,
    },
    /// Mint an HS256 JWT signed with the secret in a file.
    MintJwt {
        #[arg(long)]
        secret_file: PathBuf,
        #[arg(long)]
        issuer: String,
        #[arg(long)]
        audience: String,
        #[arg(long, default_value = "test-user")]
        subject: String,
        /// PREFIX=OPS, e.g. 'chat/=read,write'; repeatable.
        #[arg(long = "grant", required = true)]
        grants: Vec<String>,
        /// Lifetime, e.g. 15m, 1h.
        #[arg(long, default_value = "1h", value_parser = ds_config::parse_duration)]
        ttl: Duration,
    },
}

fn parse_grants(specs: &[String]) -> anyhow::Result<Grants> {
    let mut out = Vec::new();
    for spec in specs {
        let (prefix, ops) = spec.rsplit_once('=').with_context(|| format!("grant {spec:?} is not PREFIX=OPS"))?;
        let ops = ops
            .split(',')
            .map(|op| match op.trim() {
                "read" => Ok(Op::Read),
                "write" => Ok(Op::Write),
                "admin" => Ok(Op::Admin),
                other => anyhow::bail!("grant {spec:?}: {other:?} is not read, write or admin"),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        out.push(Grant { prefix: prefix.to_owned(), ops });
    }
    Ok(Grants(out))
}

pub fn run(cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::New => println!("{}", tokens::generate()),
        TokenCommand::File { name, grants } => {
            let mut token = String::new();
            std::io::stdin().read_to_string(&mut token)?;
            let token = token.trim();
            anyhow::ensure!(!token.is_empty(), "no token on stdin");
            let entry = serde_json::json!({ "name": name, "sha256": tokens::digest_hex(token), "streams": parse_grants(&grants)? });
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "tokens": [entry] }))?);
        }
        TokenCommand::MintJwt { secret_file, issuer, audience, subject, grants, ttl } => {
            let secret = std::fs::read(&secret_file).with_context(|| format!("reading {}", secret_file.display()))?;
            let ttl = i64::try_from(ttl.as_secs()).context("ttl too large")?;
            let claims = mint::claims(&issuer, &audience, &subject, &parse_grants(&grants)?, ttl);
            println!("{}", mint::hs256(secret.trim_ascii_end(), &claims).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(())
}
