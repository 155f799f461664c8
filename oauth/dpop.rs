//! DPoP (RFC 9449, SEP-1932): a key pair that proves possession of a
//! sender-constrained access token.
//!
//! One P-256 key per server login: the token request carries a proof, so
//! the authorization server binds the token to the key's thumbprint
//! (`cnf.jkt`); every request to the MCP server then carries the token
//! under the `DPoP` scheme with a fresh proof (`htm`, `htu`, `iat`, a new
//! `jti`, and `ath`, the token's hash). The private key is kept with the
//! tokens in the secret store (a token without its key is useless). A
//! server that wants a nonce answers `use_dpop_nonce` with a `DPoP-Nonce`
//! header; the nonce is remembered per origin and the request sent once
//! more with it (RFC 9449 §8, §9) — the refused request never ran.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use sha2::{Digest, Sha256};

/// The name of the header that carries a proof.
pub(crate) const DPOP_HEADER: &str = "dpop";
/// The name of the header a server sends a nonce in.
pub(crate) const NONCE_HEADER: &str = "dpop-nonce";
/// The one signing algorithm offered.
pub(crate) const ALGORITHM: &str = "ES256";

/// Why a DPoP key could not be made, read back or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DpopError {
    /// The system's random source or the signer failed.
    #[error("DPoP: the P-256 key could not be {0}")]
    Crypto(&'static str),
    /// The stored key is not a base64 PKCS#8 P-256 key.
    #[error("DPoP: the stored key is not readable: log in again")]
    Stored,
}

/// A DPoP key pair and the nonces servers gave for it.
pub struct DpopKey {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    /// The last nonce each origin gave.
    nonces: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("thumbprint", &self.thumbprint())
            .finish_non_exhaustive()
    }
}

impl DpopKey {
    /// A new random key.
    pub fn generate() -> Result<Self, DpopError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| DpopError::Crypto("made"))?;
        Self::from_pkcs8(doc.as_ref().to_vec()).map_err(|_| DpopError::Crypto("made"))
    }

    fn from_pkcs8(pkcs8: Vec<u8>) -> Result<Self, DpopError> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8)
            .map_err(|_| DpopError::Stored)?;
        Ok(Self {
            pair,
            pkcs8,
            nonces: Mutex::new(HashMap::new()),
        })
    }

    /// The key as it is stored (base64 of its PKCS#8 form).
    pub(crate) fn to_stored(&self) -> String {
        STANDARD.encode(&self.pkcs8)
    }

    /// A key read back from [`Self::to_stored`]'s form.
    pub(crate) fn from_stored(text: &str) -> Result<Self, DpopError> {
        let bytes = STANDARD.decode(text).map_err(|_| DpopError::Stored)?;
        Self::from_pkcs8(bytes)
    }

    /// The public key as a JWK (`kty`, `crv`, `x`, `y`: the members the
    /// thumbprint is computed over, in that order).
    fn jwk(&self) -> serde_json::Value {
        let point = self.pair.public_key().as_ref();
        // An uncompressed P-256 point: 0x04, x (32 bytes), y (32 bytes).
        let (x, y) = point
            .get(1..33)
            .zip(point.get(33..65))
            .unwrap_or((&[][..], &[][..]));
        serde_json::json!({
            "crv": "P-256",
            "kty": "EC",
            "x": URL_SAFE_NO_PAD.encode(x),
            "y": URL_SAFE_NO_PAD.encode(y),
        })
    }

    /// The RFC 7638 thumbprint of the public key (the token's `cnf.jkt`).
    pub fn thumbprint(&self) -> String {
        let jwk = self.jwk();
        // The required members in lexicographic order, no whitespace.
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap_or_default(),
            jwk["y"].as_str().unwrap_or_default()
        );
        URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
    }

    /// A fresh proof for a `method` request to `url`, bound to
    /// `access_token` when one is sent, carrying the nonce the URL's
    /// origin last gave.
    pub(crate) fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
    ) -> Result<String, DpopError> {
        let htu = htu(url);
        let header = serde_json::json!({"typ": "dpop+jwt", "alg": ALGORITHM, "jwk": self.jwk()});
        let iat = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let mut jti = [0u8; 16];
        rand::fill(&mut jti);
        let mut claims = serde_json::json!({
            "jti": URL_SAFE_NO_PAD.encode(jti),
            "htm": method,
            "htu": htu,
            "iat": iat,
        });
        if let Some(token) = access_token {
            claims["ath"] = URL_SAFE_NO_PAD
                .encode(Sha256::digest(token.as_bytes()))
                .into();
        }
        if let Some(nonce) = self.nonce_for(url) {
            claims["nonce"] = nonce.into();
        }
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .map_err(|_| DpopError::Crypto("used to sign"))?;
        Ok(format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    fn nonce_for(&self, url: &str) -> Option<String> {
        let nonces = self.nonces.lock().unwrap_or_else(|p| p.into_inner());
        nonces.get(&origin(url)).cloned()
    }

    /// Remember the nonce `url`'s origin sent; whether it is a new one (a
    /// request refused for want of it is worth sending again only then).
    pub(crate) fn remember_nonce(&self, url: &str, nonce: &str) -> bool {
        let mut nonces = self.nonces.lock().unwrap_or_else(|p| p.into_inner());
        nonces.insert(origin(url), nonce.to_owned()).as_deref() != Some(nonce)
    }
}

/// The `htu` of a request: its URL without query and fragment.
fn htu(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

fn origin(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_owned())
}

/// Whether a response's challenge asks for a DPoP nonce.
pub(crate) fn wants_nonce(challenge_or_body: &str) -> bool {
    challenge_or_body.contains("use_dpop_nonce")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};

    fn part(jwt: &str, i: usize) -> serde_json::Value {
        let p = jwt.split('.').nth(i).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap()
    }

    #[test]
    fn a_proof_is_a_signed_dpop_jwt_bound_to_the_request_and_the_token() {
        let key = DpopKey::generate().unwrap();
        let proof = key
            .proof("POST", "https://mcp.example.com/mcp?x=1#f", Some("tok"))
            .unwrap();
        let header = part(&proof, 0);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert!(header["jwk"].get("d").is_none(), "no private part");
        let claims = part(&proof, 1);
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://mcp.example.com/mcp");
        assert_eq!(
            claims["ath"],
            URL_SAFE_NO_PAD.encode(Sha256::digest(b"tok")).as_str()
        );
        assert!(claims.get("nonce").is_none());
        // The signature verifies with the public key in the header.
        let (input, sig) = proof.rsplit_once('.').unwrap();
        let point = key.pair.public_key().as_ref().to_vec();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
            .verify(input.as_bytes(), &URL_SAFE_NO_PAD.decode(sig).unwrap())
            .unwrap();
        // Each proof has its own jti.
        let again = key
            .proof("POST", "https://mcp.example.com/mcp", None)
            .unwrap();
        assert_ne!(part(&again, 1)["jti"], claims["jti"]);
    }

    #[test]
    fn a_nonce_is_sent_to_the_origin_that_gave_it_and_the_key_survives_storage() {
        let key = DpopKey::generate().unwrap();
        assert!(key.remember_nonce("https://as.example.com/token", "n1"));
        assert!(!key.remember_nonce("https://as.example.com/other", "n1"));
        let to_as = key
            .proof("POST", "https://as.example.com/token", None)
            .unwrap();
        assert_eq!(part(&to_as, 1)["nonce"], "n1");
        let to_rs = key
            .proof("POST", "https://mcp.example.com/mcp", None)
            .unwrap();
        assert!(part(&to_rs, 1).get("nonce").is_none());
        let back = DpopKey::from_stored(&key.to_stored()).unwrap();
        assert_eq!(back.thumbprint(), key.thumbprint());
        assert!(matches!(
            DpopKey::from_stored("bm90IGEga2V5"),
            Err(DpopError::Stored)
        ));
    }

    #[test]
    fn the_thumbprint_is_rfc_7638s() {
        // RFC 7638 §3.1 computes over exactly these members in this order;
        // here the same computation over the JWK's own members.
        let key = DpopKey::generate().unwrap();
        let jwk = key.jwk();
        let canonical = serde_json::to_string(&serde_json::json!({
            "crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"], "y": jwk["y"]
        }))
        .unwrap();
        assert_eq!(
            key.thumbprint(),
            URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
        );
    }
}
