"""The Streamlit views of the designer and the pure pieces they draw with.

Views are ``*_ui()`` functions that draw widgets and return plain values; pictures, figures and
the paint canvas's payloads are pure functions tested without Streamlit.
"""
