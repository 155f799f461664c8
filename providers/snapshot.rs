//! Element tokens and the page snapshot (SEAT-6): the script that lists a
//! page's interactable elements, and the token rules.
//!
//! A token is `g<generation>e<index>`: the generation of the snapshot that
//! handed it out, so a token of an older snapshot is stale by construction.

/// The script run by `snapshot`: marks every visible interactable element
/// with `data-mcpvisor-token` and returns them, with the page's text.
/// `__GEN__` is replaced by the generation.
pub(crate) const SNAPSHOT_JS: &str = r#"(() => {
  const gen = __GEN__;
  for (const el of document.querySelectorAll('[data-mcpvisor-token]')) el.removeAttribute('data-mcpvisor-token');
  const sel = 'a[href], button, input, textarea, select, summary, [role], [onclick], [contenteditable=""], [contenteditable="true"], [tabindex]';
  const out = [];
  let i = 0;
  for (const el of document.querySelectorAll(sel)) {
    if (el.disabled || (el.type === 'hidden')) continue;
    const r = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    if (r.width === 0 || r.height === 0 || style.visibility === 'hidden' || style.display === 'none') continue;
    i += 1;
    const token = 'g' + gen + 'e' + i;
    el.setAttribute('data-mcpvisor-token', token);
    const tag = el.tagName.toLowerCase();
    let role = el.getAttribute('role');
    if (!role) {
      if (tag === 'a') role = 'link';
      else if (tag === 'button' || (tag === 'input' && ['button', 'submit', 'reset'].includes(el.type))) role = 'button';
      else if (tag === 'input' && el.type === 'checkbox') role = 'checkbox';
      else if (tag === 'input' && el.type === 'radio') role = 'radio';
      else if (tag === 'input' || tag === 'textarea' || el.isContentEditable) role = 'textbox';
      else if (tag === 'select') role = 'combobox';
      else role = tag;
    }
    let name = el.getAttribute('aria-label') || '';
    if (!name && el.labels && el.labels.length) name = el.labels[0].innerText;
    if (!name) name = el.innerText || el.value || el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('name') || '';
    name = name.replace(/\s+/g, ' ').trim().slice(0, 80);
    const item = { token, role, name };
    if (tag === 'input' || tag === 'textarea' || tag === 'select') item.value = String(el.value).slice(0, 80);
    if (el.type === 'checkbox' || el.type === 'radio') item.checked = el.checked;
    if (tag === 'a') item.href = el.getAttribute('href');
    out.push(item);
  }
  const text = (document.body ? document.body.innerText : '').replace(/\n{3,}/g, '\n\n').slice(0, 4000);
  return JSON.stringify({ title: document.title, url: location.href, elements: out, text });
})()"#;

/// One element of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Element {
    pub(crate) token: String,
    pub(crate) role: String,
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) value: Option<String>,
    #[serde(default)]
    pub(crate) checked: Option<bool>,
    #[serde(default)]
    pub(crate) href: Option<String>,
}

/// What the snapshot script returns.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct Snapshot {
    pub(crate) title: String,
    pub(crate) url: String,
    pub(crate) elements: Vec<Element>,
    pub(crate) text: String,
}

impl Snapshot {
    /// The text the model sees: each element's token next to its role and
    /// name, then the page's text.
    pub(crate) fn render(&self, generation: u64) -> String {
        let mut out = format!(
            "page: {} <{}>\nsnapshot g{generation}: {} interactable element(s); tokens of earlier snapshots are stale.\n",
            self.title,
            self.url,
            self.elements.len()
        );
        for e in &self.elements {
            out.push_str(&format!("[{}] {} {:?}", e.token, e.role, e.name));
            if let Some(v) = &e.value {
                out.push_str(&format!(" value={v:?}"));
            }
            if let Some(c) = e.checked {
                out.push_str(if c { " checked" } else { " unchecked" });
            }
            if let Some(h) = &e.href {
                out.push_str(&format!(" -> {h}"));
            }
            out.push('\n');
        }
        if !self.text.trim().is_empty() {
            out.push_str("\npage text:\n");
            out.push_str(self.text.trim());
            out.push('\n');
        }
        out
    }
}

/// Why a token cannot be used now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// Not of the form `g<N>e<M>`.
    Malformed(String),
    /// No snapshot was taken on this page yet (or it navigated since).
    NoSnapshot(String),
    /// From an older snapshot.
    Stale { token: String, current: u64 },
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::Malformed(t) => write!(
                f,
                "{t:?} is not an element token (tokens look like g3e17 and come from `snapshot`)"
            ),
            TokenError::NoSnapshot(t) => write!(
                f,
                "token {t} is stale: the page changed (navigated or was closed) since that snapshot; take a new snapshot and use its tokens"
            ),
            TokenError::Stale { token, current } => write!(
                f,
                "token {token} is stale: it comes from an older snapshot (the latest is g{current}); take a new snapshot and use its tokens"
            ),
        }
    }
}

/// Check `token` against the latest snapshot's generation (`None`: no
/// valid snapshot on the current page).
pub(crate) fn check_token(token: &str, current: Option<u64>) -> Result<(), TokenError> {
    let generation = token
        .strip_prefix('g')
        .and_then(|rest| rest.split_once('e'))
        .filter(|(_, i)| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|(g, _)| g.parse::<u64>().ok())
        .ok_or_else(|| TokenError::Malformed(token.to_owned()))?;
    match current {
        None => Err(TokenError::NoSnapshot(token.to_owned())),
        Some(c) if c != generation => Err(TokenError::Stale {
            token: token.to_owned(),
            current: c,
        }),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_of_an_older_snapshot_is_stale_by_construction() {
        assert_eq!(check_token("g3e17", Some(3)), Ok(()));
        let stale = check_token("g2e17", Some(3)).unwrap_err();
        assert!(stale.to_string().contains("take a new snapshot"), "{stale}");
        assert!(stale.to_string().contains("g3"), "{stale}");
        assert!(matches!(
            check_token("g3e1", None),
            Err(TokenError::NoSnapshot(_))
        ));
        for bad in ["", "e3", "g3", "g3e", "gxe1", "g3e1x", "#button"] {
            assert!(
                matches!(check_token(bad, Some(3)), Err(TokenError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_rendering_shows_each_token_beside_its_role_and_name() {
        let s: Snapshot = serde_json::from_str(
            r#"{"title":"T","url":"http://127.0.0.1/","text":"Hello",
                "elements":[{"token":"g1e1","role":"button","name":"Go"},
                            {"token":"g1e2","role":"textbox","name":"Name","value":""}]}"#,
        )
        .unwrap();
        let text = s.render(1);
        assert!(text.contains("[g1e1] button \"Go\""), "{text}");
        assert!(
            text.contains("[g1e2] textbox \"Name\" value=\"\""),
            "{text}"
        );
        assert!(text.contains("snapshot g1: 2 interactable"), "{text}");
    }
}
