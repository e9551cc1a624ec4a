// Placeholder: the dashboard's single-page app.
document.getElementById('app').textContent = 'Loom dashboard';
