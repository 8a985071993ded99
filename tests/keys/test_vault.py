"""The key vault: Fernet round trip, states, and no key, token or secret in any error or repr."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from framecast.config import Secret
from framecast.keys.vault import KeyUnreadable, KeyVault, KeyVaultState, Rotation, last4

KEY = "sk-live-0123456789abcdefWXYZ"


def secret() -> Secret:
    return Secret(Fernet.generate_key().decode("ascii"))


def test_round_trip_gives_the_key_back_as_a_secret() -> None:
    vault = KeyVault(enabled=True, secret=secret())
    assert vault.state is KeyVaultState.READY
    token = vault.encrypt(KEY)
    assert isinstance(token, bytes) and KEY.encode() not in token
    assert vault.encrypt(KEY) != token  # Fernet tokens carry a random IV
    plain = vault.decrypt(token)
    assert isinstance(plain, Secret) and plain.reveal() == KEY
    assert KEY not in repr(plain) and KEY not in str(plain)


def test_states() -> None:
    assert KeyVault(enabled=False, secret=secret()).state is KeyVaultState.DISABLED
    assert KeyVault(enabled=True, secret=None).state is KeyVaultState.NO_SECRET
    assert KeyVault(enabled=True, secret=Secret("")).state is KeyVaultState.NO_SECRET
    assert KeyVault(enabled=False, secret=None).state is KeyVaultState.DISABLED


@pytest.mark.parametrize(
    "vault", [KeyVault(enabled=False, secret=secret()), KeyVault(enabled=True, secret=None)]
)
def test_a_vault_that_is_not_ready_stores_and_reads_nothing(vault: KeyVault) -> None:
    with pytest.raises(RuntimeError) as info:
        vault.encrypt(KEY)
    assert KEY not in str(info.value)
    token = KeyVault(enabled=True, secret=secret()).encrypt(KEY)
    with pytest.raises(KeyUnreadable):
        vault.decrypt(token)


def test_a_changed_secret_makes_stored_keys_unreadable_without_leaking() -> None:
    first = secret()
    token = KeyVault(enabled=True, secret=first).encrypt(KEY)
    other = KeyVault(enabled=True, secret=secret())
    with pytest.raises(KeyUnreadable) as info:
        other.decrypt(token)
    text = f"{info.value!s} {info.value!r}"
    assert KEY not in text and token.decode() not in text and first.reveal() not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__
    for garbage in (b"", b"not a token", "text"):
        with pytest.raises(KeyUnreadable):
            other.decrypt(garbage)  # type: ignore[arg-type]


def test_a_malformed_secret_is_refused_without_echoing_it() -> None:
    bad = "not-a-fernet-key-but-a-secret-anyway"
    with pytest.raises(ValueError) as info:
        KeyVault(enabled=True, secret=Secret(bad))
    assert bad not in str(info.value) and info.value.__cause__ is None


def test_repr_names_only_the_state() -> None:
    s = secret()
    vault = KeyVault(enabled=True, secret=s)
    assert repr(vault) == "KeyVault(state=ready)"
    assert s.reveal() not in repr(vars(vault))  # not even the Fernet object shows the secret


def test_encrypt_refuses_an_empty_key() -> None:
    vault = KeyVault(enabled=True, secret=secret())
    with pytest.raises(ValueError):
        vault.encrypt("")


def test_last4() -> None:
    assert last4(KEY) == "WXYZ"
    assert last4(f"  {KEY}\n") == "WXYZ"
    assert last4("abcdefgh") == "efgh"
    assert last4("short") == ""  # four characters of a short key would give most of it away


def test_a_list_of_secrets_encrypts_with_the_first_and_reads_with_any() -> None:
    old, new = secret(), secret()
    stored_under_old = KeyVault(enabled=True, secret=old).encrypt(KEY)
    vault = KeyVault(enabled=True, secret=Secret(f"{new.reveal()}, {old.reveal()}"))
    assert vault.state is KeyVaultState.READY
    assert vault.decrypt(stored_under_old).reveal() == KEY
    fresh = vault.encrypt(KEY)
    assert KeyVault(enabled=True, secret=new).decrypt(fresh).reveal() == KEY  # the first key encrypts
    with pytest.raises(KeyUnreadable):
        KeyVault(enabled=True, secret=old).decrypt(fresh)
    assert new.reveal() not in repr(vars(vault)) and old.reveal() not in repr(vars(vault))


def test_rotate_re_encrypts_old_tokens_with_the_first_key_once() -> None:
    old, new, stranger = secret(), secret(), secret()
    vault = KeyVault(enabled=True, secret=Secret(f"{new.reveal()},{old.reveal()}"))
    outcome, rotated = vault.rotate(KeyVault(enabled=True, secret=old).encrypt(KEY))
    assert outcome is Rotation.ROTATED and rotated is not None
    assert KeyVault(enabled=True, secret=new).decrypt(rotated).reveal() == KEY  # old key not needed now
    assert vault.rotate(rotated) == (Rotation.CURRENT, None)  # a second run writes nothing
    assert vault.rotate(vault.encrypt(KEY)) == (Rotation.CURRENT, None)
    foreign = KeyVault(enabled=True, secret=stranger).encrypt(KEY)
    assert vault.rotate(foreign) == (Rotation.UNREADABLE, None)
    assert vault.rotate(b"not a token") == (Rotation.UNREADABLE, None)


def test_a_vault_that_is_not_ready_rotates_nothing() -> None:
    with pytest.raises(RuntimeError) as info:
        KeyVault(enabled=True, secret=None).rotate(KeyVault(enabled=True, secret=secret()).encrypt(KEY))
    assert KEY not in str(info.value)
