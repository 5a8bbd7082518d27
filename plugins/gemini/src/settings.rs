//! The plugin's settings (`[plugins.gemini.config]` in `reson.toml`) and
//! the price table that turns usage into a cost.

use reson_sdk::provider::{ProviderError, Usage};

/// The API root when `base_url` is not set.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";
/// The secret holding the API key when `api_key_secret` is not set.
pub const DEFAULT_SECRET: &str = "GEMINI_API_KEY";

/// What the plugin reads from its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The API root, without a trailing `/`.
    pub base_url: String,
    /// The name of the secret the host substitutes for the API key.
    pub secret: String,
    /// Prices, when any is set; without them a response has no cost.
    pub prices: Option<Prices>,
}

/// USD per million tokens of each kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Settings {
    /// Reads the settings through `get` (the host's `config::get`).
    ///
    /// A cache price left unset is charged at the input price: without a
    /// discount the user told us about, a cost shown too high is the safer
    /// error.
    pub fn load(get: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let base_url = get("base_url")
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let secret = match get("api_key_secret") {
            None => DEFAULT_SECRET.to_owned(),
            Some(name) => valid_secret_name(name.trim())?,
        };
        let price = |key: &str| get(key).map(|value| parse_price(key, &value)).transpose();
        let input = price("price_input_per_mtok")?;
        let output = price("price_output_per_mtok")?;
        let cache_read = price("price_cache_read_per_mtok")?;
        let cache_write = price("price_cache_write_per_mtok")?;
        let prices = if [input, output, cache_read, cache_write].iter().all(Option::is_none) {
            None
        } else {
            let input = input.unwrap_or(0.0);
            Some(Prices {
                input,
                output: output.unwrap_or(0.0),
                cache_read: cache_read.unwrap_or(input),
                cache_write: cache_write.unwrap_or(input),
            })
        };
        Ok(Self { base_url, secret, prices })
    }
}

impl Prices {
    /// The cost in USD of `usage`. Cached prompt tokens are part of
    /// `prompt_tokens` and are charged at their own price instead of the
    /// input price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cache_read_tokens.saturating_add(usage.cache_write_tokens);
        let uncached = usage.prompt_tokens.saturating_sub(cached);
        let per_token = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per_token(uncached, self.input)
            + per_token(usage.cache_read_tokens, self.cache_read)
            + per_token(usage.cache_write_tokens, self.cache_write)
            + per_token(usage.completion_tokens, self.output)
    }
}

/// The secret name must survive being written as `{{secret:NAME}}`.
fn valid_secret_name(name: &str) -> Result<String, ProviderError> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(name.to_owned())
    } else {
        Err(ProviderError::Other(format!(
            "gemini: setting `api_key_secret` must be a secret name (letters, digits, `_`, `-`, \
             `.`), not `{name}`"
        )))
    }
}

fn parse_price(key: &str, value: &str) -> Result<f64, ProviderError> {
    match value.trim().parse::<f64>() {
        Ok(price) if price.is_finite() && price >= 0.0 => Ok(price),
        _ => Err(ProviderError::Other(format!(
            "gemini: setting `{key}` must be a non-negative number of USD per million tokens, \
             not `{value}`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<Settings, ProviderError> {
        Settings::load(|key| {
            pairs.iter().find(|(k, _)| *k == key).map(|(_, value)| (*value).to_owned())
        })
    }

    fn usage(prompt: u64, completion: u64, cache_read: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            reasoning_tokens: 0,
            cache_read_tokens: cache_read,
            cache_write_tokens: 0,
        }
    }

    #[test]
    fn defaults_name_the_public_api_and_key_and_set_no_prices() {
        let settings = load(&[]).unwrap();
        assert_eq!(settings.base_url, DEFAULT_BASE_URL);
        assert_eq!(settings.secret, "GEMINI_API_KEY");
        assert_eq!(settings.prices, None);
    }

    #[test]
    fn settings_override_the_defaults() {
        let settings = load(&[
            ("base_url", " http://localhost:8080/v1beta/ "),
            ("api_key_secret", "MY_GEMINI_KEY"),
            ("price_input_per_mtok", "0.30"),
            ("price_output_per_mtok", "2.5"),
        ])
        .unwrap();
        assert_eq!(settings.base_url, "http://localhost:8080/v1beta");
        assert_eq!(settings.secret, "MY_GEMINI_KEY");
        let prices = settings.prices.unwrap();
        assert_eq!((prices.input, prices.output), (0.30, 2.5));
        assert_eq!((prices.cache_read, prices.cache_write), (0.30, 0.30));
    }

    #[test]
    fn bad_settings_are_refused_naming_the_key() {
        let err = load(&[("price_output_per_mtok", "cheap")]).unwrap_err();
        assert!(matches!(&err, ProviderError::Other(m) if m.contains("price_output_per_mtok")));
        assert!(load(&[("price_input_per_mtok", "-1")]).is_err());
        assert!(load(&[("price_input_per_mtok", "NaN")]).is_err());
        let err = load(&[("api_key_secret", "{{secret:X}}")]).unwrap_err();
        assert!(matches!(&err, ProviderError::Other(m) if m.contains("api_key_secret")));
    }

    #[test]
    fn cost_charges_cached_prompt_tokens_at_the_cache_price() {
        let settings = load(&[
            ("price_input_per_mtok", "1"),
            ("price_output_per_mtok", "10"),
            ("price_cache_read_per_mtok", "0.25"),
        ])
        .unwrap();
        let prices = settings.prices.unwrap();
        // 600k uncached input, 400k cached, 100k output.
        let cost = prices.cost(&usage(1_000_000, 100_000, 400_000));
        assert!((cost - (0.6 + 0.1 + 1.0)).abs() < 1e-9, "{cost}");
        // Counts a buggy server could send must not underflow.
        assert!(prices.cost(&usage(10, 0, 50)) >= 0.0);
    }
}
